"""The paper dry run's refusal on a fresh machine names, for each missing file, the fetch or the
command that makes it (a store: its ``convert`` command and where the fetch says its files come
from), not only its name."""

from __future__ import annotations

from orchestrator import ablate
from tests.orchestrator.refusing import refused


def test_each_missing_name_comes_with_what_makes_it(tmp_path, capsys, monkeypatch):
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.setenv("MMEMB_DATA", str(tmp_path / "empty"))
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hf"))
    line = refused(work, ablate.main, ["--grid", "dalr_table2", "--profile", "paper",
                                       "--dry-run"], "lacks what these runs read", capsys,
                   monkeypatch)
    for named in (
            "wiki1m_for_simcse.txt (python -m trainables.fetch paper --only wiki1m)",
            "senteval/downstream (python -m trainables.fetch paper --only senteval)",
            "flickr30k_clip_vitl14.parquet (python -m trainables.convert clip-json --json "
            "$MMEMB_DATA/flickr30k_ViT_L14.json --out $MMEMB_DATA/flickr30k_clip_vitl14.parquet, "
            "from the files python -m trainables.fetch paper --only flickr30k-clip says where",
            "flickr30k_mcse_resnet50.parquet (python -m trainables.convert mcse ",
            "teachers/unsup-simcse-bert-base-uncased (python -m trainables.fetch paper --only "
            "simcse)",
            "the encoder bert-base-uncased (Hugging Face cache) (python -m trainables.fetch paper "
            "--only bert-base-uncased)"):
        assert named in line, (named, line)
