"""Config validation: defaults from the schema, every problem named by key path, docs in sync."""

import copy
from pathlib import Path

import pytest
import yaml

from apertus.cli import main as cli_main
from apertus.core import REPO_ROOT
from apertus.core.config import (
    ConfigError,
    apply_defaults,
    load_config,
    load_schema,
    load_yaml,
    parse_override,
    render_reference,
    validate_config,
)

SCHEMA = load_schema()

# A schema shaped like a stage's section, independent of what the real schema holds today.
STAGE_SCHEMA = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "type": "object",
    "additionalProperties": False,
    "$defs": {
        "source": {
            "type": "object",
            "additionalProperties": False,
            "properties": {
                "name": {"type": "string"},
                "reader": {"type": "string", "enum": ["jsonl", "parquet"], "default": "jsonl"},
            },
            "required": ["name"],
        }
    },
    "properties": {
        "data": {
            "type": "object",
            "additionalProperties": False,
            "properties": {
                "seed": {"type": "integer", "minimum": 0, "default": 5},
                "sources": {"type": "array", "items": {"$ref": "#/$defs/source"}, "default": []},
            },
        }
    },
}


def errors_of(config, schema=STAGE_SCHEMA):
    with pytest.raises(ConfigError) as info:
        validate_config(copy.deepcopy(config), schema)
    return str(info.value)


def test_defaults_fill_every_depth_including_list_items():
    config = {"data": {"sources": [{"name": "web"}]}}
    validate_config(config, STAGE_SCHEMA)
    assert config == {"data": {"seed": 5, "sources": [{"name": "web", "reader": "jsonl"}]}}


def test_misspelled_key_is_named_with_path_and_suggestion():
    message = errors_of({"data": {"sed": 3}})
    assert "unknown key 'data.sed' (did you mean 'seed'?)" in message
    assert "allowed under key 'data': seed, sources" in message


def test_misspelled_top_level_section_is_rejected():
    assert "unknown key 'dta' (did you mean 'data'?)" in errors_of({"dta": {}})


def test_wrong_type_names_key_and_expected_type():
    message = errors_of({"data": {"seed": "five"}})
    assert "key 'data.seed' must be of type integer, got string 'five'" in message


def test_problems_inside_lists_are_named_by_index():
    message = errors_of({"data": {"sources": [{"name": "a"}, {"name": "b", "reader": "warc"}]}})
    assert "key 'data.sources[1].reader' is 'warc'; allowed values: 'jsonl', 'parquet'" in message
    assert "missing key 'data.sources[0].name'" in errors_of({"data": {"sources": [{}]}})


def test_every_problem_is_reported_at_once():
    message = errors_of({"data": {"seed": -1, "typo": 1}, "other": 2})
    assert "'data.seed' is -1; it must be >= 0" in message
    assert "unknown key 'data.typo'" in message
    assert "unknown key 'other'" in message


def test_text_that_looks_like_a_boolean_or_number_gets_a_hint():
    schema = {
        "type": "object",
        "properties": {"offline": {"type": "boolean"}, "lr": {"type": "number"}},
    }
    assert "write booleans as True/False" in errors_of({"offline": "false"}, schema)
    # PyYAML reads `lr: 1e-4` as the string '1e-4'
    lr = yaml.safe_load("lr: 1e-4")["lr"]
    assert "write e.g. 1.0e-4" in errors_of({"lr": lr}, schema)


def test_embedded_default_is_valid_and_complete():
    config = load_config()
    assert config["run"] == "default"
    assert config["offline"] is True
    assert config["resources"]["default"]["threads"] >= 1


def test_overrides_merge_over_files(tmp_path):
    preset = tmp_path / "preset.yaml"
    preset.write_text("run: big\nresources: {default: {mem_mb: 64000}}\n")
    config = load_config([preset], ["resources.default.threads=8"])
    assert config["run"] == "big"
    default = config["resources"]["default"]
    assert (default["threads"], default["mem_mb"], default["runtime"]) == (8, 64000, 60)
    assert default["gpus"] == 0 and default["slurm_partition"] is None  # schema defaults


def test_misspelled_key_in_a_config_file_names_key(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("resources:\n  default:\n    mem_mbb: 10\n")
    with pytest.raises(ConfigError, match=r"unknown key 'resources\.default\.mem_mbb'") as info:
        load_config([bad])
    assert str(bad) in str(info.value)


def test_yaml_syntax_error_names_file_and_line(tmp_path):
    bad = tmp_path / "broken.yaml"
    bad.write_text("run: ok\nresources: [\n")
    with pytest.raises(ConfigError, match=r"broken\.yaml, line 3: invalid YAML"):
        load_config([bad])


def test_config_file_that_is_not_a_mapping_is_refused(tmp_path):
    bad = tmp_path / "list.yaml"
    bad.write_text("- a\n- b\n")
    with pytest.raises(ConfigError, match="must hold a mapping"):
        load_config([bad])


def test_override_syntax():
    assert parse_override("a.b.c=1.0e-4") == {"a": {"b": {"c": 1e-4}}}
    assert parse_override("offline=false") == {"offline": False}
    with pytest.raises(ConfigError, match="KEY=VALUE"):
        parse_override("novalue")


def _objects(node, path="config"):
    if isinstance(node, dict):
        if node.get("type") == "object" and "properties" in node:
            yield path, node
        for key, value in node.items():
            yield from _objects(value, f"{path}.{key}")


def test_schema_rejects_unknown_keys_everywhere():
    for path, obj in _objects(SCHEMA):
        assert obj.get("additionalProperties") is False, f"{path} accepts unknown keys"


def test_schema_documents_and_defaults_every_leaf():
    def leaves(node, path):
        for key, sub in node.get("properties", {}).items():
            if "$ref" in sub:
                sub = SCHEMA["$defs"][sub["$ref"].rsplit("/", 1)[1]]
            if sub.get("type") == "object" and "properties" in sub:
                yield from leaves(sub, f"{path}.{key}")
            else:
                yield f"{path}.{key}", sub

    for path, leaf in leaves(SCHEMA, "config"):
        assert leaf.get("description"), f"{path} has no description"
        assert "default" in leaf, f"{path} has no default (the schema is the source of defaults)"


def test_schema_defaults_satisfy_the_schema():
    config = {}
    apply_defaults(config, SCHEMA)
    validate_config(config, SCHEMA)


@pytest.mark.parametrize(
    "preset", sorted((REPO_ROOT / "config" / "presets").glob("*.yaml")), ids=lambda p: p.name
)
def test_presets_are_valid(preset):
    load_config([preset])


def test_config_reference_is_current():
    current = (REPO_ROOT / "config" / "README.md").read_text()
    assert current == render_reference(), (
        "config/README.md is stale: run `apertus config docs --write`"
    )


def test_reference_lists_every_leaf_key():
    text = render_reference()
    for key in ("run", "results_dir", "offline", "resources.default.mem_mb"):
        assert f"| `{key}` |" in text


def test_cli_check_reports_bad_key_without_traceback(tmp_path, capsys):
    bad = tmp_path / "typo.yaml"
    bad.write_text(yaml.safe_dump({"offlin": True}))
    with pytest.raises(SystemExit) as info:
        cli_main(["config", "check", "--configfile", str(bad)])
    assert info.value.code == 2
    err = capsys.readouterr().err
    assert "unknown key 'offlin' (did you mean 'offline'?)" in err
    assert "Traceback" not in err


def test_cli_show_prints_resolved_config(capsys):
    with pytest.raises(SystemExit) as info:
        cli_main(["config", "show", "run=demo"])
    assert info.value.code == 0
    shown = yaml.safe_load(capsys.readouterr().out)
    assert shown["run"] == "demo"
    assert shown["resources"]["default"]["runtime"] == 60


def test_config_comes_from_the_checkout_in_the_current_directory(tmp_path, capsys, monkeypatch):
    """Another checkout of the pipeline (its own config/config.yaml and schema): `apertus
    config show` run there resolves its config, not the installed checkout's."""
    import shutil

    from apertus.core import REPO_ROOT

    (tmp_path / "config").mkdir()
    (tmp_path / "workflow").mkdir()
    shutil.copytree(REPO_ROOT / "workflow" / "schemas", tmp_path / "workflow" / "schemas")
    (tmp_path / "workflow" / "Snakefile").write_text("")
    default = yaml.safe_load((REPO_ROOT / "config" / "config.yaml").read_text())
    (tmp_path / "config" / "config.yaml").write_text(yaml.safe_dump({**default, "run": "theirs"}))
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as info:
        cli_main(["config", "show"])
    assert info.value.code == 0
    assert yaml.safe_load(capsys.readouterr().out)["run"] == "theirs"
    monkeypatch.chdir(tmp_path / "config")  # not a checkout: the installed one's
    assert load_config()["run"] == default.get("run", "default")


def test_optional_mapping_gets_defaults_and_clear_errors():
    config = load_config(overrides=["resources.data.threads=2"])
    data = config["resources"]["data"]
    assert (data["threads"], data["mem_mb"], data["runtime"], data["gpus"]) == (2, 4000, 60, 0)
    assert load_config()["resources"]["data"] is None
    with pytest.raises(ConfigError, match=r"unknown key 'resources\.data\.thread' \(did you mean"):
        load_config(overrides=["resources.data.thread=2"])


def test_cli_docs_prints_the_reference_and_writes_only_when_asked(capsys, monkeypatch):
    written = []
    monkeypatch.setattr("apertus.cli.atomic_write_text", lambda path, text: written.append(path))
    with pytest.raises(SystemExit) as info:
        cli_main(["config", "docs"])
    assert info.value.code == 0 and not written
    assert capsys.readouterr().out == render_reference()
    with pytest.raises(SystemExit):
        cli_main(["config", "docs", "--write"])
    assert written == [REPO_ROOT / "config" / "README.md"]


def test_cli_run_checks_overrides_before_snakemake_and_passes_them_as_a_file(capsys, monkeypatch):
    started = []
    monkeypatch.setattr(
        "apertus.cli.run_until_stopped", lambda command, cwd: started.append(command) or 0
    )
    with pytest.raises(SystemExit) as info:
        cli_main(["run", "pretrain.lr.peek=1e-3", "--", "-n"])
    assert info.value.code == 2 and not started
    assert "unknown key 'pretrain.lr.peek'" in capsys.readouterr().err
    with pytest.raises(SystemExit) as info:
        cli_main(["run", "pretrain.lr.peak=1e-3", "--", "-n", "--cores", "1"])  # 1e-3: a number
    assert info.value.code == 0
    (command,) = started
    assert command[1:6] == ["-m", "snakemake", "-n", "--cores", "1"]
    assert command[6] == "--configfile"
    assert yaml.safe_load(Path(command[7]).read_text()) == {"pretrain": {"lr": {"peak": 0.001}}}
    with pytest.raises(SystemExit) as info:
        cli_main(["config", "check", "-c", "x.yaml"])  # -c is Snakemake's cores: not ours
    assert info.value.code == 2


def test_a_key_given_twice_in_one_yaml_mapping_is_refused_naming_both_lines(tmp_path):
    path = tmp_path / "dup.yaml"
    path.write_text("pretrain:\n  seq_len: 128\n  lr: {peak: 1.0e-3}\n  seq_len: 64\n")
    with pytest.raises(ConfigError, match=r"dup\.yaml, line 4: .*'seq_len' appears twice .*line 2"):
        load_config([path])
    merged = tmp_path / "merge.yaml"  # a merge's keys may be overridden: that is not a repeat
    merged.write_text("x-base: &b\n  seq_len: 1\npretrain:\n  <<: *b\n  seq_len: 64\n")
    assert load_yaml(merged)["pretrain"] == {"seq_len": 64}


def test_nan_and_infinity_are_refused_naming_the_key(tmp_path):
    path = tmp_path / "nan.yaml"
    path.write_text("export: {verify: {tolerance: .nan}}\npretrain: {grad_clip: .inf}\n")
    with pytest.raises(ConfigError) as refused:
        load_config([path])
    assert "key 'export.verify.tolerance' is nan; it must be a finite number" in str(refused.value)
    assert "key 'pretrain.grad_clip' is inf" in str(refused.value)
