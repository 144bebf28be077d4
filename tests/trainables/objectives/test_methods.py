"""The method API (trainables.objectives.methods): the built-in methods as registered methods, what
registration refuses, plug-ins from a file, a module or an installed package's entry point, a
fresh process that loads them from where they came from, and how settings meet overrides,
profiles and config hashes."""

from __future__ import annotations

import dataclasses
import json
import os
import pickle
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

import tests.trainables.plugin_method  # noqa: F401  (registers "auxhead")
from orchestrator.spec.grids import Cell, Grid
from orchestrator.spec.plan import plan_runs
from tests.trainables.objectives.references import batch
from trainables.config.profiles import build_config, explain_config
from trainables.config.run_config import RunConfig, load_yaml
from trainables.objectives import METHODS, compute_objective
from trainables.objectives.methods import (
    Head,
    HeadDims,
    Method,
    Needs,
    Settings,
    builtin_names,
    ensure_methods,
    get,
    load_methods,
    names,
    register,
    resolve_heads,
    source,
    sources,
)
from trainables.runtime.checks import POSITIVE, setting

ROOT = Path(__file__).resolve().parents[3]
EXAMPLE = ROOT / "examples" / "softground.py"
BUILTIN = ("simcse", "mcse", "kdmcse", "dalr")


def fresh_python(code: str, cwd: Path) -> str:
    """Run ``code`` in a new interpreter (nothing imported by hand), the repo on its path."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


# --- the built-in methods ---------------------------------------------------------------
def test_the_four_papers_are_registered_methods_one_module_each():
    assert set(BUILTIN) <= set(names()) and builtin_names() == METHODS == tuple(sorted(BUILTIN))
    for m in BUILTIN:
        module, file = source(m)
        assert module == f"trainables.objectives.{m}" and file.endswith(f"objectives/{m}.py")
    assert sources(BUILTIN) == {}  # nothing to load elsewhere: they ship with mmemb


def test_get_config_dict_is_the_methods_description():
    s = build_config("demo", "kdmcse").objective
    assert s.get_config_dict() == get("kdmcse").describe(get("kdmcse").settings(lam=1.0))
    aux = get("auxhead").settings()  # a method without describe(): every setting
    assert aux.get_config_dict() == {"method": "auxhead", **dataclasses.asdict(aux)}


# --- registration ------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class GoodSettings(Settings):
    tau: float = setting(0.05, POSITIVE)


def _method(name="reg_ok", settings=GoodSettings, **attrs):
    return type("M", (Method,), {"name": name, "settings": settings, **attrs})


class Undecorated(Settings):  # forgot @dataclass(frozen=True): its fields would not be settings
    tau: float = setting(0.05, POSITIVE)


@dataclasses.dataclass(frozen=True)
class NoCheck(Settings):
    tau: float = 0.05


@dataclasses.dataclass(frozen=True)
class NoDefault(Settings):
    tau: float = setting(check=POSITIVE)


@dataclasses.dataclass(frozen=True)
class NamedMethod(Settings):
    method: str = setting("x", POSITIVE)


@dataclasses.dataclass(frozen=True)
class BadDefault(Settings):
    tau: float = setting(-1.0, POSITIVE)


@dataclasses.dataclass(frozen=True)
class NotSettings:
    tau: float = setting(0.05, POSITIVE)


@pytest.mark.parametrize(("kw", "words"), [
    ({"name": "Bad-Name"}, "name must be lower-case"),
    ({"settings": Undecorated}, "must be a @dataclass.frozen=True."),
    ({"settings": NotSettings}, "subclass of trainables.objectives.methods.Settings"),
    ({"settings": NoCheck}, "field 'tau' declares no check"),
    ({"settings": NoDefault}, "setting 'tau' needs a default"),
    ({"settings": NamedMethod}, "'method' is objective.method itself"),
    ({"settings": BadDefault}, "default settings fail: objective.tau=-1.0 must be"),
    ({"name": "mcse"}, "method 'mcse' is defined twice"),
])
def test_register_refuses_in_one_line_what_would_fail_later(kw, words):
    with pytest.raises(ValueError, match=words) as e:
        register(_method(**{"name": f"reg_{len(words)}", **kw}))
    assert "\n" not in str(e.value)
    assert kw.get("name", f"reg_{len(words)}") not in names() or kw.get("name") == "mcse"


def test_a_settings_class_belongs_to_one_method():
    register(_method("reg_one"))
    with pytest.raises(ValueError, match="already belong to method 'reg_one'"):
        register(type("Other", (Method,), {"name": "reg_two", "settings": GoodSettings}))


def test_needs_refuse_what_cannot_come_together():
    with pytest.raises(ValueError, match="come with caption batches"):
        Needs(captions=False, image=True)
    with pytest.raises(ValueError, match="set text_teachers=True"):
        Needs(teacher_tokens=True)


@pytest.mark.parametrize(("heads", "dims", "words"), [
    ({"x": Head("tokens", 4)}, (8, 4, 6, None), "input must be one of"),
    ({"x": Head("cls", 4, into=("p1",))}, (8, 4, 6, None), "into must name 2"),
    ({"x": Head("image", 4, into=("z1",))}, (8, 4, 6, None), "into must name 1"),
    ({"encoder": Head("cls", 4)}, (8, 4, 6, None), "not one of"),
    ({"x": Head("image", 4)}, (8, 4, None, None), "reads the image feature but the run has none"),
    ({"x": Head("image", 4, batches="all")}, (8, 4, 6, None), "caption batches only"),
    ({"x": Head("z", 0)}, (8, 4, 6, None), "out_dim=0 must be a positive integer"),
])
def test_heads_are_checked_when_resolved(heads, dims, words):
    with pytest.raises(ValueError, match=words):
        resolve_heads(heads, HeadDims(*dims), reserved=("encoder", "mlp"))


def test_resolved_heads_take_their_input_sizes():
    (g, a) = resolve_heads({"g": Head("cls", 4, into=("p1", "p2")),
                            "a": Head("image", 3, kind="aligner", width=None)},
                           HeadDims(8, 4, 6, None))
    assert g == ("g", Head("cls", 4, into=("p1", "p2"), in_dim=8, width=8))
    assert (a[1].in_dim, a[1].width) == (6, 6)


# --- plug-ins: files, modules, entry points, fresh processes -----------------------------
def write_method(folder: Path, stem: str, name: str, body: str = "") -> Path:
    path = folder / f"{stem}.py"
    path.write_text(textwrap.dedent(f"""
        from dataclasses import dataclass
        from trainables.runtime.checks import POSITIVE, setting
        from trainables.objectives.methods import Method, Needs, Settings, register

        @dataclass(frozen=True)
        class S(Settings):
            temperature: float = setting(0.07, POSITIVE)

        @register
        class M(Method):
            name = "{name}"
            settings = S
            def needs(self, s):
                return Needs(captions=False, image=False)
        {body}
    """))
    return path


def test_load_methods_from_a_file_or_a_module(tmp_path):
    path = write_method(tmp_path, "my_file_method", "file_method")
    assert load_methods([str(path)]) == ["file_method"]
    first = get("file_method")
    assert load_methods([str(path)]) == ["file_method"] and get("file_method") is first  # no re-run
    assert sources(["file_method"]) == {"file_method": ("my_file_method", str(path.resolve()))}
    assert load_methods(["tests.trainables.plugin_method"]) == ["auxhead"]


@pytest.mark.parametrize(("content", "words"), [
    ("x = 1\n", "registers no method"),
    ("def broken(:\n", "SyntaxError"),
    ("raise RuntimeError('boom')\n", "RuntimeError: boom; fix that file"),
])
def test_a_broken_method_file_is_one_line_naming_it(tmp_path, content, words):
    path = tmp_path / f"broken_{abs(hash(content))}.py"
    path.write_text(content)
    with pytest.raises(ValueError, match=words) as e:
        load_methods([str(path)])
    assert str(path) in str(e.value) and "\n" not in str(e.value)


def test_a_missing_file_or_module_is_named():
    with pytest.raises(ValueError, match="no such file"):
        load_methods(["/nowhere/mine.py"])
    with pytest.raises(ValueError, match="cannot import it"):
        load_methods(["no_such_module_of_methods"])


def test_an_installed_packages_entry_point_registers_its_method(tmp_path, monkeypatch):
    write_method(tmp_path, "ep_methods_pkg", "ep_method")
    dist = tmp_path / "ep_methods_pkg-0.1.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: ep-methods-pkg\nVersion: 0.1\n")
    (dist / "entry_points.txt").write_text("[mmemb.methods]\nmine = ep_methods_pkg\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    assert "ep_method" not in sys.modules and get("ep_method").name == "ep_method"
    cfg = build_config("demo", overrides={"objective.method": "ep_method"})
    assert cfg.objective.temperature == 0.07


def test_a_fresh_process_loads_a_plugin_from_its_settings_or_its_source(tmp_path):
    path = write_method(tmp_path, "fresh_method_mod", "fresh_method")
    load_methods([str(path)])
    s = get("fresh_method").settings(temperature=0.2)
    blob = tmp_path / "settings.pkl"
    blob.write_bytes(pickle.dumps(s))
    out = fresh_python(f"""
        import pickle, sys
        s = pickle.loads(open({str(blob)!r}, "rb").read())  # never imported by hand
        print(s.method, s.temperature, "fresh_method_mod" in sys.modules)
    """, ROOT)
    assert out == "fresh_method 0.2 True"
    out = fresh_python(f"""
        from trainables.objectives.methods import ensure_methods, get
        ensure_methods({sources(["fresh_method"])!r})
        print(get("fresh_method").settings().temperature)
    """, tmp_path.parent)
    assert out == "0.07"
    with pytest.raises(ValueError, match="does not exist on this machine"):
        ensure_methods({"gone_method": ("gone_method_mod", str(tmp_path / "gone.py"))})


def test_a_builtin_configs_hash_does_not_depend_on_other_methods():
    load_methods([str(EXAMPLE)])
    here = {m: build_config("demo", m).config_hash() for m in BUILTIN}
    there = fresh_python("""
        import json
        from trainables.config.profiles import build_config
        print(json.dumps({m: build_config("demo", m).config_hash()
                          for m in ("simcse", "mcse", "kdmcse", "dalr")}))
    """, ROOT)
    assert json.loads(there) == here
    d = build_config("demo", "kdmcse").to_dict()["objective"]
    assert set(d) == {"method", *(f.name for f in dataclasses.fields(get("kdmcse").settings))}


# --- overrides, profiles, explain --------------------------------------------------------
def test_the_method_key_goes_first_whatever_the_order():
    load_methods([str(EXAMPLE)])
    a = RunConfig().with_overrides({"objective.alpha": 0.5, "objective.method": "softground",
                                    "data.demo": True})
    b = RunConfig().with_overrides({"data.demo": True, "objective.method": "softground",
                                    "objective.alpha": 0.5})
    assert a == b and a.objective.alpha == 0.5 and a.objective.method == "softground"
    kd = RunConfig().with_overrides({"objective.method": "kdmcse", "objective.threshold": 0.8,
                                     "data.demo": True})
    assert kd.with_overrides({"objective.lam": 2.0}).objective.threshold == 0.8  # same method
    assert kd.with_overrides({"objective.method": "dalr"}).objective == get("dalr").settings()


def test_an_unknown_key_names_the_method_and_its_settings():
    with pytest.raises(ValueError) as e:
        RunConfig().with_overrides({"objective.method": "simcse", "objective.lam": 0.1})
    assert str(e.value) == ("unknown setting 'objective.lam' for method 'simcse'; its settings "
                            "(SimCSESettings): temperature, text_margin")
    with pytest.raises(ValueError, match=r"grid g, cell 'S': unknown setting 'objective.lam' for "
                                         r"method 'simcse'"):
        plan_runs(Grid("g", "t", (Cell("M", {"objective.method": "mcse"}),
                                   Cell("S", {"objective.method": "simcse"})),
                       baseline="M", seeds=(0, 1), base={"objective.lam": 0.1}), "demo")


def test_a_profile_serves_every_method(tmp_path):
    load_methods([str(EXAMPLE)])
    prof = tmp_path / "p.yaml"
    prof.write_text("data:\n  demo: true\nobjective:\n  alpha: 0.7\n  teacher_weights: [1.0]\n")
    assert load_yaml(prof)["objective.alpha"] == 0.7  # some method has it: accepted
    sg = build_config(str(prof), "softground")
    assert sg.objective.alpha == 0.7
    # alpha and teacher_weights left out; the demo recipe's lam (the profile is a demo)
    assert build_config(str(prof), "mcse").objective == get("mcse").settings(lam=1.0)
    assert build_config(str(prof), "dalr").objective.teacher_weights == (1.0,)
    prof.write_text("data:\n  demo: true\nobjective:\n  alhpa: 0.7\n")
    with pytest.raises(ValueError, match="unknown setting 'objective.alhpa': no method has it"):
        load_yaml(prof)


def test_explain_names_a_plugins_defaults_and_recipe():
    load_methods([str(EXAMPLE)])
    cfg, origins = explain_config("demo", [("cell X", {"objective.method": "softground"})])
    assert origins["objective.alpha"] == "method default (SoftGroundSettings)"
    assert origins["objective.lam"] == "recipe softground (demo)" and cfg.objective.lam == 1.0
    assert "objective.teacher_weights" not in origins  # the demo profile's, for DALR only


def test_a_plugins_settings_are_search_dimensions():
    from orchestrator.spec.spaces import FloatRange, SearchSpace, params_to_overrides
    from orchestrator.spec.validate import validate_space

    load_methods([str(EXAMPLE)])
    alpha = FloatRange("objective.alpha", 0.0, 0.9)
    space = SearchSpace("sg", "alpha", {"objective.method": "softground"},
                        lambda t: alpha.suggest(t) and None, {"objective.method": "mcse"})
    validate_space(space)
    cfg = build_config("demo", overrides=params_to_overrides(space, {"objective.alpha": 0.25}))
    assert (cfg.objective.method, cfg.objective.alpha) == ("softground", 0.25)


def test_a_student_saves_its_plugin_heads_and_loads_from_them(tiny_bert, tmp_path):
    from trainables.models.student import Student, StudentConfig

    torch.manual_seed(0)
    s = Student(StudentConfig(encoder=str(tiny_bert), method="auxhead", proj_dim=8, image_dim=12))
    assert (s.aux.in_features, s.aux.out_features) == (32, 16) and s.clip_text_head is None
    s.save_pretrained(tmp_path / "st")
    saved = json.loads((tmp_path / "st" / "student_config.json").read_text())
    assert [h[0] for h in saved["heads"]] == ["grounding", "image_head", "aux"]
    saved["method"] = "not_registered_here"  # the heads alone rebuild it
    (tmp_path / "st" / "student_config.json").write_text(json.dumps(saved))
    back = Student.from_pretrained(tmp_path / "st")
    assert back.config.heads == s.config.heads
    for k, v in s.heads_state_dict().items():
        assert torch.equal(back.heads_state_dict()[k], v), k


def test_a_loss_must_give_a_total_and_scalar_terms():
    @dataclasses.dataclass(frozen=True)
    class BadLossSettings(Settings):
        tau: float = setting(0.05, POSITIVE)

    class BadLoss(Method):
        name = "bad_loss"
        settings = BadLossSettings
        out: dict = {}

        def needs(self, s):
            return Needs(captions=False, image=False)

        def text_loss(self, s, out):
            return dict(self.out)

    m = register(BadLoss())
    st, _ = batch(seed=51)
    m.out = {"text": st.z1.sum()}
    with pytest.raises(ValueError, match=r"without 'total'"):
        compute_objective(BadLossSettings(), st, None)
    m.out = {"per_row": st.z1.sum(1), "total": st.z1.sum()}
    with pytest.raises(ValueError, match=r"term 'per_row' is torch.Size\(\[7\]\); a term is a scalar"):
        compute_objective(BadLossSettings(), st, None)
