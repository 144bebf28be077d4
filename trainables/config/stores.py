"""What the paper profile reads under ``$MMEMB_DATA``: one table of file names.

The paper profile (``profiles.paper_profile``), the grids (``search_spaces/_common.py``), the
fetch's instructions (``trainables/fetch/catalog.py``), the converters' default ``--out``
(``trainables/data/converters.py``) and the README's data section take their names from here, so
they cannot disagree; ``tests/test_data_names.py`` checks that every store a grid reads on the
paper profile is made by an instruction the fetch prints, and that the README names these files.
Kept apart from ``profiles`` (which imports torch) so the fetch and the converters start fast.
"""

from __future__ import annotations

from dataclasses import dataclass

DATA_ROOT = "$MMEMB_DATA"
"""a data path (``data.text``, ``data.pairs``, ``data.senteval``) may start with it: a grid names
``$MMEMB_DATA/coco_clip_vitl14.parquet``, and the folder is read when a config is built, not when
the grid is imported"""

TEXT_FILE = "wiki1m_for_simcse.txt"
"""Wiki1M, one sentence a line, under the name SimCSE's ``data/download_wiki.sh`` gives it"""
SENTEVAL_DIR = "senteval/downstream"
"""SentEval's ``data/downstream`` folder (STS, SICK and the transfer tasks)"""
TEACHERS_DIR = "teachers"
"""the text teachers' model folders, one per ``TEACHER_DIRS`` entry"""

# DALR text teachers (DALR paper, Table 9) under $MMEMB_DATA/teachers/, named as the paper
# profile names the default pair so the default combination hashes the same either way.
TEACHER_DIRS = {
    "simcse": "unsup-simcse-bert-base-uncased",
    "diffcse": "DiffCSE-bert-base-uncased",
    "rankcse": "RankCSE-listmle-bert-base-uncased",
    "clip": "clip-vit-large-patch14",
}


@dataclass(frozen=True)
class Store:
    """A feature store under ``$MMEMB_DATA`` and the released files it is made from."""

    file: str
    """the store's file name under ``$MMEMB_DATA``"""
    convert: str
    """the ``python -m trainables.convert`` subcommand that makes it from ``sources``"""
    sources: tuple[tuple[str, str], ...]
    """(option of that subcommand, released file under ``$MMEMB_DATA``), in the command's order"""
    columns: tuple[str, ...] = ("image", "clip_text")
    """its feature columns (``trainables/data/store.py``): a CLIP store has the caption's CLIP
    feature too, MCSE's ResNet store only the image's"""
    extract: tuple[str, str] | None = None
    """(captions CSV, images folder) under ``$MMEMB_DATA``: ``python -m trainables.extract`` makes
    the same kind of store from the dataset's own images, where those can be had"""

    @property
    def path(self) -> str:
        """``$MMEMB_DATA/<file>``, the spelling a grid or a profile file uses"""
        return f"{DATA_ROOT}/{self.file}"

    def source_files(self) -> tuple[str, ...]:
        return tuple(name for _, name in self.sources)


STORES: dict[str, Store] = {
    # KDMCSE's and DALR's Flickr30k: the CLIP ViT-L/14 JSON, every caption of every image
    # (158,915 pairs), docs/official-code.md §5.5. The paper profile's default store.
    "flickr30k": Store("flickr30k_clip_vitl14.parquet", "clip-json",
                       (("--json", "flickr30k_ViT_L14.json"),),
                       extract=("flickr30k_captions.csv", "flickr30k-images")),
    # MCSE's Flickr30k: its released files, one random caption per training image and its
    # ResNet-50 features (29,783 pairs), docs/official-code.md §4.3. The MCSE cells of every
    # wiki+flickr table (their baseline) and of mcse_table4 read it; an MCSE cell given the CLIP
    # text features (KDMCSE Table 5) reads the CLIP store, as it has none.
    "flickr30k-mcse": Store("flickr30k_mcse_resnet50.parquet", "mcse",
                            (("--captions", "flickr_random_captions.txt"),
                             ("--features", "flickr_resnet.hdf5")), columns=("image",)),
    # COCO: KDMCSE's released CLIP JSON, every caption of every train2014 image (DALR's
    # wiki+coco script reads the same file). Every cell of the wiki+coco tables reads it.
    "coco": Store("coco_clip_vitl14.parquet", "clip-json", (("--json", "train_coco_ViT_L14.json"),),
                  extract=("coco_captions.csv", "coco-images")),
}
RESNET_COLUMN = "resnet"
"""the image feature DALR Table 9's ResNet cells read (``data.image_column``): a column of
``STORES['flickr30k']`` beside its CLIP ones, added from the Flickr30k images by
``python -m trainables.extract --column resnet --model RESNET_MODEL``"""
RESNET_MODEL = "microsoft/resnet-50"
"""ImageNet ResNet-50, its pooled 2048-d feature: the image encoder of that column"""
PAPER_STORE = STORES["flickr30k"].file
"""the paper profile's ``data.pairs``"""
MCSE_STORE = STORES["flickr30k-mcse"].file
"""what the paper profile reads for MCSE instead (``profiles.PAPER_STORES``)"""
MCSE_COCO_FILES = ("coco_random_captions.txt", "coco_resnet.hdf5")
"""MCSE's own COCO release (one random caption per train2014 image, ResNet-50 features). No shipped
grid reads a store made from it: the wiki+coco tables train every method, MCSE included, on
``STORES['coco']`` (docs/official-code.md, the table of remaining differences)."""


def read_names() -> set[str]:
    """Every name above that the paper profile or a grid reads, relative to ``$MMEMB_DATA``."""
    return ({TEXT_FILE, SENTEVAL_DIR} | {s.file for s in STORES.values()}
            | {f"{TEACHERS_DIR}/{d}" for d in TEACHER_DIRS.values()})


def store_named(file: str) -> Store | None:
    """The table's store of that file name, or None."""
    return next((s for s in STORES.values() if s.file == file), None)
