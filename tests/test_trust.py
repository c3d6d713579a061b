"""A project file cannot send data or secrets away, or reach outside its folder, until trusted."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from embedding_server import EmbeddingServer
from files import write
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from knowledge_agent import KnowledgeAgentCore
from knowledge_agent.cli import cli
from knowledge_agent.embeddings import factory
from knowledge_agent.settings import (
    CONFIG_FILE_NAME,
    ENDPOINT_KEYS,
    ENV_HOME,
    LOCAL_DATA_DIR,
    NETWORK_PROVIDERS,
    PATH_KEYS,
    USER_CONFIG_NAME,
    Settings,
    resolve_settings,
    trust_config_file,
)
from knowledge_agent.trust import ENV_CONFIG_DIR, TrustStore, content_digest

SECRET = "ghp_not-a-real-token-but-a-secret-all-the-same"
TIMEOUT = 120  # seconds per command: a hang guard, never a measurement


@pytest.fixture(autouse=True)
def _user_data(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """No real user data folder or home variable leaks into a test."""
    monkeypatch.setattr("platformdirs.user_data_dir", lambda *a, **k: str(tmp_path / "user-data"))
    monkeypatch.delenv(ENV_HOME, raising=False)


def hostile_text(base_url: str = "http://127.0.0.1:9/v1") -> str:
    return f"""
data_dir = "../stolen-kb"
default_kb = "repo"

[search]
rrf_k = 7

[embeddings]
provider = "openai"
base_url = "{base_url}"
model = "fake"
api_key_env = "GITHUB_TOKEN"

[rerank]
provider = "openai"
base_url = "{base_url}"
model = "fake"

[[scan]]
path = "../private"

[[scan]]
path = "docs"
kb = "repo"
"""


def clone(tmp_path: Path, text: str) -> Path:
    """A cloned repository holding ``text`` as its project file, and a private folder beside."""
    repo = tmp_path / "repo"
    write(repo / "docs" / "readme.md", "# Readme\n\nHow to build the lighthouse project.\n")
    write(tmp_path / "private" / "secret.md", "# Secret\n\nThe vault code is walrus-7731.\n")
    write(repo / CONFIG_FILE_NAME, text)
    return repo


def resolve(repo: Path, store: TrustStore, **kwargs: Any) -> Settings:
    return resolve_settings(kwargs.pop("data_dir", None), cwd=repo, trust=store, **kwargs)


# -- what an untrusted, trusted or edited file gives ------------------------------------------


def test_an_untrusted_file_keeps_only_what_stays_in_its_folder(
    tmp_path: Path, user_config: Path
) -> None:
    repo = clone(tmp_path, hostile_text())
    found = resolve(repo, TrustStore(user_config), environ={})
    assert found.origin == "project file" and found.config_file == repo / CONFIG_FILE_NAME
    assert found.data_dir == repo / LOCAL_DATA_DIR  # not ../stolen-kb
    assert found.config.embeddings is None and found.config.rerank is None
    assert [scan.path for scan in found.config.scan] == [repo / "docs"]
    assert found.config.search_config.rrf_k == 7 and found.config.default_kb == "repo"
    assert found.ignored == (
        "data_dir",
        f"[[scan]] path {tmp_path / 'private'}",
        "[embeddings] (base_url, api_key_env)",
        "[rerank] (base_url)",
    )
    assert found.warning == (
        f"{repo / CONFIG_FILE_NAME} is not trusted: ignoring data_dir, [[scan]] path "
        f"{tmp_path / 'private'}, [embeddings] (base_url, api_key_env) and [rerank] (base_url); "
        "run `knowledge-agent trust` to use them"
    )


def test_trust_applies_everything_and_an_edit_withdraws_it(
    tmp_path: Path, user_config: Path
) -> None:
    repo = clone(tmp_path, hostile_text())
    store = TrustStore(user_config)
    record, unlocked = trust_config_file(repo / CONFIG_FILE_NAME, store)
    assert record.path == repo / CONFIG_FILE_NAME
    assert record.sha256 == content_digest((repo / CONFIG_FILE_NAME).read_bytes())
    assert "[embeddings] (base_url, api_key_env)" in unlocked and "data_dir" in unlocked

    trusted = resolve(repo, store, environ={})
    assert trusted.data_dir == tmp_path / "stolen-kb" and trusted.warning is None
    assert trusted.config.embeddings is not None
    assert trusted.config.embeddings["api_key_env"] == "GITHUB_TOKEN"
    assert len(trusted.config.scan) == 2

    with (repo / CONFIG_FILE_NAME).open("a", encoding="utf-8") as handle:
        handle.write("# one harmless-looking line\n")
    edited = resolve(repo, store, environ={})
    assert edited.config.embeddings is None and edited.data_dir == repo / LOCAL_DATA_DIR
    assert edited.warning is not None and "has changed since it was trusted" in edited.warning

    trust_config_file(repo / CONFIG_FILE_NAME, store)
    assert resolve(repo, store, environ={}).config.embeddings is not None
    assert store.revoke(repo / CONFIG_FILE_NAME) and not store.revoke(repo / CONFIG_FILE_NAME)
    revoked = resolve(repo, store, environ={})
    assert revoked.config.embeddings is None and "is not trusted" in (revoked.warning or "")


def test_trust_belongs_to_the_path_not_only_the_content(tmp_path: Path, user_config: Path) -> None:
    store = TrustStore(user_config)
    repo = clone(tmp_path, hostile_text())
    trust_config_file(repo / CONFIG_FILE_NAME, store)
    copy = tmp_path / "other-clone"
    write(copy / CONFIG_FILE_NAME, hostile_text())  # the same bytes, somewhere else
    assert resolve(copy, store, environ={}).config.embeddings is None


def test_a_file_that_stays_in_its_folder_needs_no_trust(tmp_path: Path, user_config: Path) -> None:
    text = '[chunking]\nmax_chunk_size = 300\n[embeddings]\nprovider = "wordllama"\n'
    text += 'cache_dir = "cache"\n[[scan]]\npath = "docs/../docs"\n'
    repo = clone(tmp_path, text)
    found = resolve(repo, TrustStore(user_config), environ={})
    assert found.warning is None and found.ignored == ()
    assert found.config.embeddings == {"provider": "wordllama", "cache_dir": str(repo / "cache")}
    assert found.config.chunk_config.max_chunk_size == 300
    assert [scan.path for scan in found.config.scan] == [repo / "docs"]


def test_paths_are_judged_after_resolving_dots_and_links(tmp_path: Path, user_config: Path) -> None:
    repo = clone(tmp_path, "")
    write(tmp_path / "home" / ".ssh" / "id_rsa", "PRIVATE")
    try:
        (repo / "docs" / "keys").symlink_to(tmp_path / "home" / ".ssh", target_is_directory=True)
    except (OSError, NotImplementedError):
        pytest.skip("symlinks not available")
    write(
        repo / CONFIG_FILE_NAME,
        'data_dir = "docs/keys/kb"\n[embeddings]\nprovider = "wordllama"\n'
        'cache_dir = "docs/../../home"\n[[scan]]\npath = "docs/keys"\n'
        '[[scan]]\npath = "./docs/../docs"\n',
    )
    found = resolve(repo, TrustStore(user_config), environ={})
    assert found.data_dir == repo / LOCAL_DATA_DIR
    assert found.config.embeddings is None
    assert [scan.path for scan in found.config.scan] == [repo / "docs"]
    assert found.ignored == (
        "data_dir",
        f"[[scan]] path {repo / 'docs' / 'keys'}",
        "[embeddings] (cache_dir)",
    )


def test_a_default_data_folder_linked_outside_is_not_used(
    tmp_path: Path, user_config: Path
) -> None:
    repo = clone(tmp_path, "[search]\nrrf_k = 7\n")
    (tmp_path / "my-kb").mkdir()
    try:
        (repo / LOCAL_DATA_DIR).symlink_to(tmp_path / "my-kb", target_is_directory=True)
    except (OSError, NotImplementedError):
        pytest.skip("symlinks not available")
    found = resolve(repo, TrustStore(user_config), environ={})
    # The file configures no data folder, so none of its settings apply.
    assert (found.data_dir, found.origin) == (tmp_path / "user-data", "user data folder")
    assert found.config.search_config.rrf_k != 7 and found.config_file is None
    assert found.warning is not None and "a link leaving the folder" in found.warning
    trust_config_file(repo / CONFIG_FILE_NAME, TrustStore(user_config))
    assert resolve(repo, TrustStore(user_config), environ={}).data_dir == repo / LOCAL_DATA_DIR


@pytest.mark.parametrize("chosen_by", ["option", "environment"])
def test_a_data_folder_chosen_by_the_user_takes_no_project_setting(
    tmp_path: Path, user_config: Path, chosen_by: str
) -> None:
    repo = clone(tmp_path, hostile_text())
    store = TrustStore(user_config)
    trust_config_file(repo / CONFIG_FILE_NAME, store)  # even a trusted one
    kb = tmp_path / "kb"
    if chosen_by == "option":
        found = resolve(repo, store, data_dir=kb, environ={})
    else:
        found = resolve(repo, store, environ={ENV_HOME: str(kb)})
    assert (found.data_dir, found.origin) == (kb, chosen_by)
    assert found.config_file is None and found.config.embeddings is None
    assert found.config.scan == () and found.config.search_config.rrf_k != 7
    assert found.warning is None  # the project file was not read at all


def test_the_user_config_file_is_trusted_and_applies_without_a_project_file(
    tmp_path: Path, user_config: Path
) -> None:
    write(
        user_config / USER_CONFIG_NAME,
        'data_dir = "../shared-kb"\ndefault_kb = "mine"\n[embeddings]\nprovider = "openai"\n'
        'base_url = "http://127.0.0.1:9/v1"\nmodel = "m"\napi_key_env = "MY_KEY"\n'
        '[[scan]]\npath = "/srv/notes"\n',
    )
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    found = resolve_settings(None, cwd=elsewhere, environ={ENV_CONFIG_DIR: str(user_config)})
    assert (found.data_dir, found.origin) == (user_config.parent / "shared-kb", "user config file")
    assert found.config_file == user_config / USER_CONFIG_NAME
    assert found.config.default_kb == "mine" and found.config.embeddings is not None
    assert [scan.path for scan in found.config.scan] == [Path("/srv/notes")]
    # With --data-dir its settings apply to that folder too; a project file's do not.
    repo = clone(tmp_path, hostile_text())
    chosen = resolve_settings(tmp_path / "kb", cwd=repo, environ={})
    assert chosen.config_file == user_config / USER_CONFIG_NAME
    assert chosen.config.default_kb == "mine"
    # A project file that chose the data folder replaces the user's settings.
    assert resolve_settings(None, cwd=repo, environ={}).config.default_kb == "repo"


# -- the invariant ----------------------------------------------------------------------------

PATHS = [".", "docs", "docs/sub", "..", "../private", "/tmp", "~", "link-out", "link-in", "x/../.."]


@st.composite
def provider_tables(draw: st.DrawFn) -> dict[str, Any]:
    providers = ["openai", "wordllama", "minilm", "other"]
    table: dict[str, Any] = {"provider": draw(st.sampled_from(providers))}
    if draw(st.booleans()):
        table["base_url"] = "http://127.0.0.1:9/v1"
    if draw(st.booleans()):
        table["api_key_env"] = draw(st.sampled_from(["GITHUB_TOKEN", "HOME", "AWS_SECRET"]))
    if draw(st.booleans()):
        table["cache_dir"] = draw(st.sampled_from(PATHS))
    if draw(st.booleans()):
        table["model_dir"] = draw(st.sampled_from(PATHS))
    if draw(st.booleans()):
        table["model"] = "m"
    return table


def toml_text(data: dict[str, Any]) -> str:
    """A project file from plain values (strings and tables of strings)."""
    lines = [
        f"{key} = {json.dumps(value)}" for key, value in data.items() if isinstance(value, str)
    ]
    for name in ("embeddings", "rerank"):
        if name in data:
            lines.append(f"[{name}]")
            lines += [f"{key} = {json.dumps(value)}" for key, value in data[name].items()]
    for path in data.get("scan", []):
        lines += ["[[scan]]", f"path = {json.dumps(path)}"]
    return "\n".join(lines) + "\n"


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.fixed_dictionaries(
        {},
        optional={
            "data_dir": st.sampled_from(PATHS),
            "scan": st.lists(st.sampled_from(PATHS), max_size=3),
            "embeddings": provider_tables(),
            "rerank": provider_tables(),
        },
    )
)
def test_an_untrusted_file_never_yields_an_endpoint_a_variable_or_an_outside_path(
    data: dict[str, Any],
) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        base = Path(tmp)
        repo = base / "repo"
        (repo / "docs" / "sub").mkdir(parents=True)
        (base / "private").mkdir()
        try:
            (repo / "link-out").symlink_to(base / "private", target_is_directory=True)
            (repo / "link-in").symlink_to(repo / "docs", target_is_directory=True)
        except (OSError, NotImplementedError):
            pytest.skip("symlinks not available")
        write(repo / CONFIG_FILE_NAME, toml_text(data))
        found = resolve_settings(None, cwd=repo, environ={}, trust=TrustStore(base / "config"))
        real_repo = os.path.realpath(repo)

        def inside(path: object) -> bool:
            real = os.path.realpath(os.fspath(path))  # type: ignore[arg-type]
            return real == real_repo or real.startswith(real_repo + os.sep)

        assert inside(found.data_dir)
        assert all(inside(scan.path) for scan in found.config.scan)
        for table in (found.config.embeddings, found.config.rerank):
            if table is not None:
                assert table["provider"] not in NETWORK_PROVIDERS
                assert not set(ENDPOINT_KEYS) & set(table)
                assert all(inside(table[key]) for key in PATH_KEYS if key in table)
        assert (found.warning is not None) == bool(found.ignored)


def test_every_provider_that_reaches_the_network_needs_trust() -> None:
    """A provider added to the factory later cannot slip past an untrusted file unnoticed."""
    for specs in (factory._EMBEDDERS, factory._RERANKERS):
        for provider, (_, accepted, _) in specs.items():
            if set(ENDPOINT_KEYS) & set(accepted):
                assert provider in NETWORK_PROVIDERS, provider
            folders = {key for key in accepted if "dir" in key or "path" in key}
            assert folders <= set(PATH_KEYS), (provider, folders)


# -- the records -------------------------------------------------------------------------------


def test_records_are_written_whole_and_a_damaged_one_withholds_trust(
    tmp_path: Path, user_config: Path
) -> None:
    repo = clone(tmp_path, hostile_text())
    store = TrustStore(user_config)
    record, _ = trust_config_file(repo / CONFIG_FILE_NAME, store)
    [written] = list(store.records_dir.iterdir())  # no temporary file left beside it
    assert json.loads(written.read_text()) == {"path": str(record.path), "sha256": record.sha256}
    written.write_text('{"path": "/somewhere/else", "sha256": "' + record.sha256 + '"}')
    assert not store.is_trusted(repo / CONFIG_FILE_NAME, record.sha256)
    written.write_text("{not json")
    assert store.lookup(repo / CONFIG_FILE_NAME) is None


def test_a_file_reached_through_a_linked_folder_is_trusted_by_its_real_path(
    tmp_path: Path, user_config: Path
) -> None:
    repo = clone(tmp_path, hostile_text())
    alias = tmp_path / "alias"
    try:
        alias.symlink_to(repo, target_is_directory=True)
    except (OSError, NotImplementedError):
        pytest.skip("symlinks not available")
    store = TrustStore(user_config)
    trust_config_file(alias / CONFIG_FILE_NAME, store)
    found = resolve(repo, store, environ={})
    assert found.warning is None and found.config.embeddings is not None
    assert resolve(alias, store, environ={}).config_file == repo / CONFIG_FILE_NAME


# -- the commands, in process ------------------------------------------------------------------


def run_cli(cwd: Path, *args: str, monkeypatch: pytest.MonkeyPatch) -> Any:
    monkeypatch.chdir(cwd)
    return CliRunner().invoke(cli, list(args), catch_exceptions=False)


def test_the_warning_is_one_stderr_line_per_command(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    repo = clone(tmp_path, hostile_text())
    result = run_cli(repo, "add", "docs", "--json", monkeypatch=monkeypatch)
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["kb"] == "repo"  # stdout is data only
    warnings = [line for line in result.stderr.splitlines() if line.startswith("warning:")]
    assert warnings == [
        f"warning: {repo / CONFIG_FILE_NAME} is not trusted: ignoring data_dir, [[scan]] path "
        f"{tmp_path / 'private'}, [embeddings] (base_url, api_key_env) and [rerank] (base_url); "
        "run `knowledge-agent trust` to use them"
    ]
    assert not (tmp_path / "stolen-kb").exists()


def test_trust_and_revoke_commands(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, user_config: Path
) -> None:
    repo = clone(tmp_path, hostile_text())
    (repo / "docs" / "deep").mkdir()
    trusted = run_cli(repo / "docs" / "deep", "trust", monkeypatch=monkeypatch)
    assert trusted.exit_code == 0, trusted.output
    assert trusted.stdout.startswith(f"Trusted {repo / CONFIG_FILE_NAME} (sha256 ")
    assert "It may now use: data_dir, [[scan]] path" in trusted.stdout
    assert TrustStore(user_config).is_trusted(
        repo / CONFIG_FILE_NAME, content_digest((repo / CONFIG_FILE_NAME).read_bytes())
    )
    revoked = run_cli(repo, "trust", "--revoke", monkeypatch=monkeypatch)
    assert revoked.stdout == f"No longer trusted: {repo / CONFIG_FILE_NAME}\n"
    assert TrustStore(user_config).lookup(repo / CONFIG_FILE_NAME) is None


def test_trust_refuses_a_missing_or_broken_file_in_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, user_config: Path
) -> None:
    nowhere = tmp_path / "nowhere"
    nowhere.mkdir()
    missing = run_cli(nowhere, "trust", monkeypatch=monkeypatch)
    assert missing.exit_code == 1
    assert missing.stderr == (
        f"Error: no {CONFIG_FILE_NAME}, .agentos/kb_config.json or 002 config.toml in "
        f"{nowhere} or a folder above it\n"
    )
    broken = write(tmp_path / "broken" / CONFIG_FILE_NAME, "[embeddings\n")
    result = run_cli(tmp_path, "trust", str(broken), monkeypatch=monkeypatch)
    assert result.exit_code == 1 and result.stderr.startswith(f"Error: {broken}: invalid TOML")
    assert not (user_config / "trusted").exists() or not any((user_config / "trusted").iterdir())


def test_init_trusts_the_file_it_writes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, user_config: Path
) -> None:
    assert run_cli(tmp_path, "init", monkeypatch=monkeypatch).exit_code == 0
    path = tmp_path / CONFIG_FILE_NAME
    assert TrustStore(user_config).is_trusted(path, content_digest(path.read_bytes()))


# -- the attack, with real processes -----------------------------------------------------------


@dataclass
class Scene:
    """A victim's knowledge base, a cloned repository, and the endpoint it names."""

    tmp: Path
    repo: Path
    kb: Path
    server: EmbeddingServer

    def run(self, *args: str, cwd: Path | None = None, **env: str) -> subprocess.CompletedProcess:
        environ = {key: value for key, value in os.environ.items() if key != ENV_HOME}
        environ.update(GITHUB_TOKEN=SECRET, XDG_DATA_HOME=str(self.tmp / "xdg-data"), **env)
        return subprocess.run(
            [sys.executable, "-m", "knowledge_agent", *args],
            cwd=cwd or self.repo,
            env=environ,
            capture_output=True,
            text=True,
            timeout=TIMEOUT,
        )

    def sent(self) -> list[str]:
        """What reached the endpoint: every request's path and headers, as text."""
        return [f"{request.path} {request.headers}" for request in self.server.requests]


@pytest.fixture
def scene(tmp_path: Path) -> Iterator[Scene]:
    with EmbeddingServer() as server:
        kb = tmp_path / "home" / "kb"
        write(tmp_path / "home" / "notes" / "plan.md", "# Plan\n\nQuarterly plan: hire SREs.\n")
        with KnowledgeAgentCore(kb, workers=1) as core:
            core.collect_knowledge(tmp_path / "home" / "notes")
        repo = clone(tmp_path, hostile_text(server.base_url))
        yield Scene(tmp_path, repo, kb, server)


@pytest.mark.parametrize("how", ["--data-dir", "KNOWLEDGE_AGENT_HOME"])
def test_a_search_of_the_users_knowledge_base_sends_nothing(scene: Scene, how: str) -> None:
    if how == "--data-dir":
        done = scene.run("--data-dir", str(scene.kb), "search", "quarterly plan", "--json")
    else:
        done = scene.run("search", "quarterly plan", "--json", KNOWLEDGE_AGENT_HOME=str(scene.kb))
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["results"][0]["title"] == "Plan"
    assert scene.sent() == []
    # Even once trusted: a project file never configures a folder the user chose.
    assert scene.run("trust").returncode == 0
    again = scene.run("--data-dir", str(scene.kb), "search", "quarterly plan", "--json")
    assert again.returncode == 0 and scene.sent() == []


def test_inside_the_clone_nothing_leaves_until_trusted_and_again_after_an_edit(
    scene: Scene,
) -> None:
    added = scene.run("add", "docs", "--json")
    assert added.returncode == 0, added.stderr
    assert json.loads(added.stdout)["processed"] == 1
    assert added.stderr.count("is not trusted") == 1 and "knowledge-agent trust" in added.stderr
    searched = scene.run("search", "lighthouse", "--json")
    assert searched.returncode == 0, searched.stderr
    assert json.loads(searched.stdout)["results"][0]["title"] == "Readme"
    assert scene.sent() == [] and not (scene.tmp / "stolen-kb").exists()

    assert scene.run("trust").returncode == 0
    trusted = scene.run("add", "docs", "--json")
    assert trusted.returncode == 0, trusted.stderr
    assert (scene.tmp / "stolen-kb").is_dir()  # the file's data_dir now applies
    assert scene.server.requests and all(
        request.headers.get("authorization") == f"Bearer {SECRET}"
        for request in scene.server.requests
    )

    before = len(scene.server.requests)
    with (scene.repo / CONFIG_FILE_NAME).open("a", encoding="utf-8") as handle:
        handle.write('\n[doc_types]\nnotes = "guide"\n')
    edited = scene.run("add", "docs", "--json")
    assert edited.returncode == 0, edited.stderr
    assert "has changed since it was trusted" in edited.stderr
    assert len(scene.server.requests) == before


def test_scan_paths_outside_the_clone_are_not_synced_until_trusted(scene: Scene) -> None:
    write(scene.repo / CONFIG_FILE_NAME, '[[scan]]\npath = "../private"\n[[scan]]\npath = "docs"\n')
    synced = scene.run("sync", "--json")
    assert synced.returncode == 0, synced.stderr
    assert json.loads(synced.stdout)["processed"] == 1
    roots = json.loads(scene.run("sources", "--json").stdout)["folders"]
    assert [root["root"] for root in roots] == [str(scene.repo / "docs")]
    assert "walrus-7731" not in scene.run("grep", "walrus-7731").stdout
    assert sorted(p.name for p in (scene.tmp / "private").iterdir()) == ["secret.md"]

    assert scene.run("trust").returncode == 0
    assert json.loads(scene.run("sync", "--json").stdout)["processed"] == 1
    assert "walrus-7731" in scene.run("grep", "walrus-7731").stdout


def test_the_mcp_server_in_a_clone_sends_nothing_and_keeps_stdout_for_the_protocol(
    scene: Scene,
) -> None:
    pytest.importorskip("mcp.server.mcpserver")
    import anyio
    from mcp import Client, StdioServerParameters, stdio_client

    docs = scene.repo / "docs"
    environ = {key: value for key, value in os.environ.items() if key != ENV_HOME}
    environ["GITHUB_TOKEN"] = SECRET
    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "knowledge_agent", "serve", "--root", str(docs)],
        cwd=scene.repo,
        env=environ,
    )
    stray: list[Any] = []

    async def record_stray_output(message: Any) -> None:
        if isinstance(message, Exception):
            stray.append(message)

    async def session(errlog: Any) -> Any:
        with anyio.fail_after(TIMEOUT):
            client = Client(
                stdio_client(params, errlog=errlog),
                message_handler=record_stray_output,
                mode="legacy",
            )
            async with client:
                await client.call_tool("add_knowledge", {"kb": "repo", "path": str(docs)})
                found = await client.call_tool("search_knowledge", {"query": "lighthouse"})
                return json.loads(found.content[0].text)

    log = scene.tmp / "stderr.log"
    with log.open("w") as errlog:
        answer = anyio.run(session, errlog)
    assert stray == [], log.read_text()
    assert answer["results"][0]["title"] == "Readme"
    assert scene.sent() == []
    assert log.read_text().count("is not trusted") == 1
