"""What the paper profile reads: the items fetched from the hub (``PAPER``) and the ones brought
by hand with one instruction each (``MANUAL``), under the names of the profile's one table of
stores (``trainables/config/stores.py``)."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from trainables.config.stores import (
    MCSE_COCO_FILES,
    RESNET_COLUMN,
    RESNET_MODEL,
    SENTEVAL_DIR,
    STORES,
    TEACHER_DIRS,
    TEACHERS_DIR,
    TEXT_FILE,
    Store,
)


@dataclass(frozen=True)
class Item:
    """Something the paper profile reads, fetched from one hub repository."""

    name: str
    what: str
    repo: str
    repo_type: str = "model"  # or "dataset"
    revision: str = "main"
    files: tuple[str, ...] = ()
    """dataset items: the paths to fetch; models: empty (the model files, ``MODEL_FILES``)"""
    folder: str | None = None
    """where under $MMEMB_DATA it lands; None: the Hugging Face cache, as ``cache_name``"""
    cache_name: str | None = None
    link: str | None = None
    """a folder under $MMEMB_DATA made a relative link to the cached snapshot (CLIP as a DALR
    teacher)"""
    approx: int = 0
    """bytes, as the hub listed them when this was written: the dry run's estimate"""
    unpack: str | None = None
    """a tar archive among ``files`` that is unpacked into ``folder`` and then removed"""
    pinned: str | None = None
    """why ``revision`` is pinned (said when the pin is gone upstream)"""


@dataclass(frozen=True)
class Manual:
    """Something that cannot be fetched by a script, and how to bring it."""

    name: str
    what: str
    where: str
    put: str = ""
    command: str = ""
    made: str | None = None
    """what it makes under $MMEMB_DATA (a store, a model folder): present or missing"""
    role: str = ""
    """who reads it ('required: ...'), or that it is an alternative or read by no shipped grid"""
    column: str | None = None
    """the column it adds to the store ``made`` (present when the store has it)"""


SIMCSE_DATA = "princeton-nlp/datasets-for-simcse"
SIMCSE_DATA_REV = "e145e8bb659b2aa2669f32ef79cb4cdef6c58fef"  # 'update senteval data', Sep 2021
PIN = ("the commit carrying the corrected senteval.tar of SimCSE issue #84, pinned so every "
       "machine gets the same bytes")

PAPER: tuple[Item, ...] = (
    Item("wiki1m", "Wiki1M, the text corpus (SimCSE data/download_wiki.sh)", SIMCSE_DATA,
         "dataset", SIMCSE_DATA_REV, (TEXT_FILE,), folder=".", approx=121_000_000, pinned=PIN),
    Item("senteval", "SentEval: STS12-16, STS-B, SICK and the seven transfer tasks "
         "(SimCSE SentEval/data/downstream/download_dataset.sh)", SIMCSE_DATA, "dataset",
         SIMCSE_DATA_REV, ("senteval.tar",), folder=SENTEVAL_DIR, approx=90_000_000,
         unpack="senteval.tar", pinned=PIN),
    Item("bert-base-uncased", "the BERT-base student", "google-bert/bert-base-uncased",
         cache_name="bert-base-uncased", approx=440_000_000),
    Item("roberta-base", "the RoBERTa-base student (the RoBERTa grids)", "FacebookAI/roberta-base",
         cache_name="roberta-base", approx=500_000_000),
    Item("simcse", "DALR's SimCSE text teacher", "princeton-nlp/unsup-simcse-bert-base-uncased",
         folder=f"{TEACHERS_DIR}/{TEACHER_DIRS['simcse']}", approx=440_000_000),
    Item("diffcse", "DALR's DiffCSE text teacher", "voidism/diffcse-bert-base-uncased-sts",
         folder=f"{TEACHERS_DIR}/{TEACHER_DIRS['diffcse']}", approx=1_250_000_000),
    Item("resnet-50", "ResNet-50 (trainables.extract --column resnet: DALR Table 9's ResNet "
         "cells)", RESNET_MODEL, cache_name=RESNET_MODEL, approx=103_000_000),
    Item("clip", "CLIP ViT-L/14 (trainables.extract; DALR's CLIP text teacher)",
         "openai/clip-vit-large-patch14", cache_name="openai/clip-vit-large-patch14",
         link=f"{TEACHERS_DIR}/{TEACHER_DIRS['clip']}", approx=1_710_000_000),
)

SENTEVAL_TASKS = ("STS/STS12-en-test", "STS/STS13-en-test", "STS/STS14-en-test",
                  "STS/STS15-en-test", "STS/STS16-en-test", "STS/STSBenchmark", "SICK", "MR",
                  "CR", "SUBJ", "MPQA", "SST/binary", "TREC", "MRPC")
"""the folders the STS and transfer evaluations read (trainables/evaluation/sts.py, transfer.py)"""

D = "$MMEMB_DATA"
CLIP_MODEL = "openai/clip-vit-large-patch14"
KDMCSE = "KDMCSE's README (github.com/duyngtr16061999/KDMCSE; Google Drive, no scripted download)"
MCSE = "MCSE's README (github.com/uds-lsv/MCSE; Google Drive, no scripted download)"


READ_BY: dict[str, tuple[str, ...]] = {
    "flickr30k": ("kdmcse_table1", "kdmcse_table1_roberta", "kdmcse_table2",
                  "kdmcse_table2_roberta", "kdmcse_table3", "kdmcse_table5", "kdmcse_fig7",
                  "dalr_table2", "dalr_table2_roberta", "dalr_table3", "dalr_table9",
                  "kdmcse_search", "dalr_search"),
    "flickr30k-mcse": ("kdmcse_table1", "kdmcse_table1_roberta", "kdmcse_table2",
                       "kdmcse_table2_roberta", "kdmcse_table3", "kdmcse_fig7", "mcse_table4",
                       "dalr_table2", "dalr_table2_roberta", "control_positive",
                       "control_negative", "kdmcse_search", "dalr_search"),
    "coco": ("kdmcse_table1_coco", "kdmcse_table1_roberta_coco", "kdmcse_table5_coco",
             "dalr_table8"),
    "rankcse": ("dalr_table9", "dalr_search"),
    "flickr30k-resnet": ("dalr_table9",),
}
"""the grids and searches whose runs read each by-hand store (or teacher) on the paper profile,
as the instructions say it; tests/test_data_names.py builds their configs and checks it"""


def _required(key: str, cells: str) -> str:
    return f"required: {cells} of {', '.join(READ_BY[key])} read it"


def _at(names: Iterable[str]) -> str:
    return " and ".join(f"{D}/{n}" for n in names)


def _extract(store: Store) -> str:
    pairs, images = store.extract
    return (f"python -m trainables.extract --pairs {D}/{pairs} --images {D}/{images} "
            f"--model {CLIP_MODEL} --out {D}/{store.file}")


def _manual() -> tuple[Manual, ...]:
    from trainables.data.converters import command

    flickr, mcse, coco = STORES["flickr30k"], STORES["flickr30k-mcse"], STORES["coco"]
    rankcse = f"{TEACHERS_DIR}/{TEACHER_DIRS['rankcse']}"
    return (
        Manual("flickr30k-clip", "Flickr30k captions + CLIP ViT-L/14 features, every caption of "
               "every image", f"KDMCSE's {_at(flickr.source_files())[len(D) + 1:]}, linked from "
               f"{KDMCSE}", _at(flickr.source_files()), command(flickr), flickr.file,
               _required("flickr30k", "the KDMCSE and DALR cells (and MCSE given CLIP text "
                         "features)")),
        Manual("flickr30k-images", "the same store from the Flickr30k images",
               "the Flickr30k images and captions, on request from "
               "shannon.cs.illinois.edu/DenotationGraph (their terms forbid redistribution)",
               f"{D}/{flickr.extract[1]}/ and {D}/{flickr.extract[0]} (columns image,caption)",
               _extract(flickr), flickr.file, "or, instead of flickr30k-clip"),
        Manual("flickr30k-resnet", f"a '{RESNET_COLUMN}' column of ResNet-50 features added to "
               f"{flickr.file} (its rows' images, each embedded once)",
               "the Flickr30k images (as for flickr30k-images), on request from "
               "shannon.cs.illinois.edu/DenotationGraph",
               f"{D}/{flickr.extract[1]}/ (the files the store's image ids name)",
               f"python -m trainables.extract --images {D}/{flickr.extract[1]} --model "
               f"{RESNET_MODEL} --column {RESNET_COLUMN} --out {D}/{flickr.file}", flickr.file,
               _required("flickr30k-resnet", "the ResNet cells"), column=RESNET_COLUMN),
        Manual("mcse-resnet", "MCSE's Flickr30k: one random caption per training image and its "
               "ResNet-50 features", f"{' and '.join(mcse.source_files())}, linked from {MCSE}",
               _at(mcse.source_files()), command(mcse), mcse.file,
               _required("flickr30k-mcse", "the MCSE cells (most tables' baseline)")),
        Manual("coco-clip", "COCO captions + CLIP ViT-L/14 features, every caption of every "
               "train2014 image", f"KDMCSE's {coco.source_files()[0]} (DALR's wiki+coco script "
               f"reads the same file), linked from {KDMCSE}", _at(coco.source_files()),
               command(coco), coco.file, _required("coco", "every cell, MCSE's too,")),
        Manual("coco-images", "the same store from the COCO images",
               "the COCO 2014 train images and their captions (cocodataset.org)",
               f"{D}/{coco.extract[1]}/ and {D}/{coco.extract[0]} (columns image,caption)",
               _extract(coco), coco.file, "or, instead of coco-clip"),
        Manual("mcse-coco", "MCSE's own COCO files (one random caption per train2014 image, "
               "ResNet-50 features)", f"{' and '.join(MCSE_COCO_FILES)}, linked from {MCSE}",
               role=f"read by no shipped table: the wiki+coco tables train every method, MCSE "
               f"included, on {coco.file} (one store per table, docs/official-code.md); to train "
               f"MCSE on its own COCO file, convert these with python -m trainables.convert mcse "
               f"and name that store as data.pairs in a cell or profile"),
        Manual("rankcse", "the RankCSE text teacher",
               "the RankCSE-listmle BERT-base checkpoint from RankCSE's authors "
               "(github.com/perceptiveshawty/RankCSE)",
               f"{D}/{rankcse}/ (config.json, weights, tokenizer)", made=f"{rankcse}/config.json",
               role=_required("rankcse", "the RankCSE runs")),
    )


MANUAL: tuple[Manual, ...] = _manual()
TARGETS = {"paper": (PAPER, MANUAL)}


def how_to_make(rel: str) -> str | None:
    """What makes ``rel`` (a name under $MMEMB_DATA, as a refusal lists it): the fetch of its
    item, or the command of the first instruction that makes it (where its files come from:
    that instruction, shown by the fetch); None for a name nothing here makes."""
    for item in PAPER:
        names = (*item.files,) if item.folder == "." else (item.folder, item.link)
        if rel in filter(None, names):
            return f"python -m trainables.fetch paper --only {item.name}"
    for m in MANUAL:
        if m.made in (rel, f"{rel}/config.json"):
            shown = f"python -m trainables.fetch paper --only {m.name}"
            return (f"{m.command}, from the files {shown} says where to get" if m.command
                    else f"bring it as {shown} says")
    return None
