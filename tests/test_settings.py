"""Where the data lives (flag > env > nearest project file > user folder) and the project file."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner
from files import write

from knowledge_agent.chunking import ChunkConfig
from knowledge_agent.cli import cli
from knowledge_agent.errors import ConfigError
from knowledge_agent.ingest.doc_types import DEFAULT_DOC_TYPE_RULES
from knowledge_agent.search.search_engine_impl import SearchConfig
from knowledge_agent.settings import (
    CONFIG_FILE_NAME,
    ENV_HOME,
    ProjectConfig,
    ScanPath,
    default_config_text,
    find_config,
    load_config,
    resolve_settings,
    trust_config_file,
    write_default_config,
)
from knowledge_agent.trust import TrustStore


@pytest.fixture
def user_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """platformdirs' answer, pointed into the test's folder."""
    folder = tmp_path / "user-data"
    calls: list[tuple[object, ...]] = []

    def user_data_dir(*args: object, **kwargs: object) -> str:
        calls.append(args)
        return str(folder)

    monkeypatch.setattr("platformdirs.user_data_dir", user_data_dir)
    monkeypatch.delenv(ENV_HOME, raising=False)
    monkeypatch.chdir(tmp_path)
    return folder


def project(folder: Path, text: str = "") -> Path:
    return write(folder / CONFIG_FILE_NAME, text)


# -- resolution order ------------------------------------------------------------------------


def test_flag_beats_env_beats_project_file_beats_user_config_beats_user_folder(
    tmp_path: Path, user_dir: Path, user_config: Path
) -> None:
    work = tmp_path / "repo" / "src" / "pkg"
    work.mkdir(parents=True)
    toml = project(tmp_path / "repo")
    env = {ENV_HOME: str(tmp_path / "env-home")}

    flag = resolve_settings(tmp_path / "flag", cwd=work, environ=env)
    assert (flag.data_dir, flag.origin) == (tmp_path / "flag", "option")
    assert flag.config_file is None  # a project file never configures a folder it did not choose

    from_env = resolve_settings(None, cwd=work, environ=env)
    assert (from_env.data_dir, from_env.origin) == (tmp_path / "env-home", "environment")

    local = resolve_settings(None, cwd=work, environ={})
    assert local.data_dir == tmp_path / "repo" / ".knowledge-agent"
    assert local.origin == "project file"

    toml.unlink()
    fallback = resolve_settings(None, cwd=work, environ={})
    assert (fallback.data_dir, fallback.origin) == (user_dir, "user data folder")
    assert fallback.config_file is None

    user_file = write(user_config / "config.toml", 'data_dir = "kb"\n')
    mine = resolve_settings(None, cwd=work, environ={})
    assert (mine.data_dir, mine.origin) == (user_config / "kb", "user config file")
    assert mine.config_file == user_file


def test_relative_flag_and_env_are_taken_from_the_working_folder(tmp_path: Path) -> None:
    settings = resolve_settings("kb", cwd=tmp_path, environ={})
    assert settings.data_dir == tmp_path / "kb"
    settings = resolve_settings(None, cwd=tmp_path, environ={ENV_HOME: "home"})
    assert settings.data_dir == tmp_path / "home"


def test_an_empty_env_variable_is_ignored(tmp_path: Path, user_dir: Path) -> None:
    settings = resolve_settings(None, cwd=tmp_path, environ={ENV_HOME: ""})
    assert settings.data_dir == user_dir


def test_the_nearest_project_file_wins(tmp_path: Path) -> None:
    project(tmp_path / "a")
    inner = project(tmp_path / "a" / "b")
    (tmp_path / "a" / "b" / "c").mkdir()
    assert find_config(tmp_path / "a" / "b" / "c") == inner
    assert find_config(tmp_path / "a") == tmp_path / "a" / CONFIG_FILE_NAME


def test_project_data_dir_is_relative_to_the_file(tmp_path: Path, user_config: Path) -> None:
    toml = project(tmp_path / "repo", 'data_dir = "../shared-kb"\n')
    (tmp_path / "repo" / "sub").mkdir()
    trust_config_file(toml, TrustStore(user_config))  # the folder is outside the project's
    settings = resolve_settings(None, cwd=tmp_path / "repo" / "sub", environ={})
    assert settings.data_dir == tmp_path / "shared-kb"


def test_the_cli_follows_the_same_order(
    tmp_path: Path, user_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def data_dir(*args: str) -> str:
        # A command that only reads names the folder it looked in, and creates nothing.
        result = CliRunner().invoke(cli, [*args, "stats", "--json"], catch_exceptions=False)
        assert result.exit_code == 1, result.output
        return result.stderr.split("no knowledge base in ", 1)[1].split(" (from the ", 1)[0]

    assert data_dir() == str(user_dir)
    project(tmp_path)
    assert data_dir() == str(tmp_path / ".knowledge-agent")
    monkeypatch.setenv(ENV_HOME, str(tmp_path / "env"))
    assert data_dir() == str(tmp_path / "env")
    assert data_dir("--data-dir", str(tmp_path / "flag")) == str(tmp_path / "flag")


# -- the project file --------------------------------------------------------------------------


def test_init_template_loads_back_as_the_defaults(tmp_path: Path) -> None:
    path = write_default_config(tmp_path)
    loaded = load_config(path)
    defaults = ProjectConfig()
    assert loaded.data_dir == tmp_path / ".knowledge-agent"
    assert loaded.chunk_config == ChunkConfig() == defaults.chunk_config
    assert loaded.search_config == SearchConfig() == defaults.search_config
    assert dict(loaded.doc_type_rules) == dict(DEFAULT_DOC_TYPE_RULES)
    assert (loaded.default_kb, loaded.scan) == (defaults.default_kb, defaults.scan)
    with pytest.raises(ConfigError, match="already exists"):
        write_default_config(tmp_path)
    assert write_default_config(tmp_path, force=True) == path


def test_init_template_documents_every_setting() -> None:
    text = default_config_text()
    for key in (
        "data_dir",
        "default_kb",
        "min_chunk_size",
        "max_chunk_size",
        "overlap_ratio",
        "fusion",
        "keyword_weight",
        "semantic_weight",
        "rrf_k",
        "[search.doc_type_weights]",
        "[doc_types]",
        "[[scan]]",
    ):
        assert key in text
    setting_lines = [line for line in text.splitlines() if "=" in line and not line.startswith("#")]
    commented = [line for line in setting_lines if "  # " in line]
    assert len(commented) >= 7  # chunking and search keys carry their comment on the line


def test_doc_type_weights_load_into_the_search_config(tmp_path: Path) -> None:
    path = tmp_path / ".knowledge-agent.toml"
    path.write_text("[search.doc_type_weights]\nadr = 1.5\ndraft = 0.5\n", encoding="utf-8")
    assert dict(load_config(path).search_config.doc_type_weights) == {"adr": 1.5, "draft": 0.5}
    path.write_text("[search.doc_type_weights]\nadr = -1\n", encoding="utf-8")
    with pytest.raises(ConfigError, match="doc_type_weights"):
        load_config(path)


def test_a_full_project_file(tmp_path: Path) -> None:
    path = project(
        tmp_path,
        """
default_kb = "handbook"

[chunking]
min_chunk_size = 50
max_chunk_size = 400
overlap_ratio = 0.1

[search]
fusion = "weighted"
keyword_weight = 1.5
semantic_weight = 0.5
rrf_k = 10

[doc_types]
Postmortems = "postmortem"

[[scan]]
path = "docs"
kb = "handbook"
include = ["*.md"]
exclude = ["drafts/"]

[[scan]]
path = "/abs/notes"
""",
    )
    config = load_config(path)
    assert config.default_kb == "handbook"
    assert config.chunk_config == ChunkConfig(
        min_chunk_size=50, max_chunk_size=400, overlap_ratio=0.1
    )
    assert config.search_config == SearchConfig(
        fusion="weighted", keyword_weight=1.5, semantic_weight=0.5, rrf_k=10
    )
    assert config.doc_type_rules == {"postmortems": "postmortem"}
    assert config.scan == (
        ScanPath(tmp_path / "docs", "handbook", ("*.md",), ("drafts/",)),
        ScanPath(Path("/abs/notes").resolve(), "default"),
    )


@pytest.mark.parametrize(
    ("text", "names"),
    [
        ("colour = 'blue'\n", "unknown key colour"),
        ("[chunking]\nmax_size = 10\n", "unknown key chunking.max_size"),
        ("[chunking]\nmax_chunk_size = 'big'\n", "chunking.max_chunk_size must be"),
        ("[chunking]\nmin_chunk_size = 900\nmax_chunk_size = 500\n", "chunking.min_chunk_size"),
        ("[search]\nfusion = 'magic'\n", "search.fusion must be one of"),
        ("[search]\nkeyword_weight = -1\n", "search.keyword_weight must be"),
        ("[search]\ncandidates = 5\n", "unknown key search.candidates"),
        ("default_kb = 3\n", "default_kb must be a string"),
        ("chunking = 3\n", "chunking must be a table"),
        ("[[scan]]\nkb = 'x'\n", "scan[1].path is required"),
        ("[[scan]]\npath = 'docs'\ninclude = '*.md'\n", "scan[1].include must be a list"),
        ("[[scan]]\npath = 'docs'\ndepth = 2\n", "unknown key scan[1].depth"),
        ("[doc_types]\nadr = 1\n", "doc_types.adr must be a non-empty string"),
        ("this is not toml\n", "invalid TOML"),
    ],
)
def test_bad_project_files_name_the_file_and_the_key(tmp_path: Path, text: str, names: str) -> None:
    path = project(tmp_path, text)
    with pytest.raises(ConfigError) as caught:
        load_config(path)
    message = str(caught.value)
    assert message.startswith(f"{path}: ")
    assert names in message
    assert "\n" not in message
