"""Choosing the backend: the data folder by default, a postgresql:// URL from the user's own
settings (option, environment, user config, a trusted project file) — never from a project
file nobody trusted — and a server URL never shown with its password."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner
from files import write

from knowledge_agent import KnowledgeAgentCore
from knowledge_agent.backends import backend_label, redacted
from knowledge_agent.cli import cli
from knowledge_agent.errors import ConfigError
from knowledge_agent.settings import (
    CONFIG_FILE_NAME,
    ENV_BACKEND,
    ENV_HOME,
    ENV_READ_BACKEND,
    load_config,
    resolve_settings,
    trust_config_file,
)
from knowledge_agent.trust import TrustStore

SERVER = "postgresql://agent:s3cret@db.example.com:5432/kb"
OTHER = "postgresql://other@db2.example.com/kb"


def test_the_folder_is_the_default_and_a_server_url_is_named_without_its_password() -> None:
    assert backend_label(None) == backend_label("") == backend_label(" local ") == "local"
    assert backend_label(SERVER) == "postgresql://agent:***@db.example.com:5432/kb"
    assert backend_label("postgres://u@h/db") == "postgres://u@h/db"  # no password to hide
    assert (
        redacted("postgresql://postgres:@/db?host=/tmp/x")
        == "postgresql://postgres:@/db?host=/tmp/x"
    )


@pytest.mark.parametrize("value", ["mysql://u:s3cret@h/db", "sqlite:///tmp/x", "db.example.com"])
def test_anything_else_is_a_config_error_that_hides_the_password(value: str) -> None:
    with pytest.raises(ConfigError, match="'local' or a postgresql:// URL") as caught:
        backend_label(value)
    assert "s3cret" not in str(caught.value)
    with pytest.raises(ConfigError, match="postgresql://"):
        KnowledgeAgentCore(backend=value)


def test_the_option_beats_the_environment_beats_the_trusted_project_file(
    tmp_path: Path, user_config: Path
) -> None:
    toml = write(tmp_path / CONFIG_FILE_NAME, f'[backend]\nurl = "{OTHER}"\n')
    trust_config_file(toml, TrustStore(user_config))
    env = {"KNOWLEDGE_AGENT_CONFIG_DIR": str(user_config)}
    assert resolve_settings(cwd=tmp_path, environ=env).backend == OTHER
    env[ENV_BACKEND] = SERVER
    assert resolve_settings(cwd=tmp_path, environ=env).backend == SERVER
    chosen = resolve_settings(backend="postgresql://third@h/kb", cwd=tmp_path, environ=env)
    assert chosen.backend == "postgresql://third@h/kb"
    assert resolve_settings(backend="local", cwd=tmp_path, environ=env).backend is None


def test_a_standby_for_searches_is_chosen_the_same_way_and_only_beside_a_server(
    tmp_path: Path, user_config: Path
) -> None:
    toml = write(
        tmp_path / CONFIG_FILE_NAME, f'[backend]\nurl = "{SERVER}"\nread_url = "{OTHER}"\n'
    )
    trust_config_file(toml, TrustStore(user_config))
    env = {"KNOWLEDGE_AGENT_CONFIG_DIR": str(user_config)}
    settings = resolve_settings(cwd=tmp_path, environ=env)
    assert (settings.backend, settings.read_backend) == (SERVER, OTHER)
    env[ENV_READ_BACKEND] = "postgresql://env-standby/kb"
    assert resolve_settings(cwd=tmp_path, environ=env).read_backend == "postgresql://env-standby/kb"
    chosen = resolve_settings(read_backend="postgresql://opt/kb", cwd=tmp_path, environ=env)
    assert chosen.read_backend == "postgresql://opt/kb"
    assert resolve_settings(backend="local", cwd=tmp_path, environ=env).read_backend is None


def test_an_untrusted_project_file_cannot_send_the_knowledge_base_to_a_server(
    tmp_path: Path, user_config: Path
) -> None:
    write(tmp_path / CONFIG_FILE_NAME, f'[backend]\nurl = "{SERVER}"\nread_url = "{OTHER}"\n')
    settings = resolve_settings(
        cwd=tmp_path, environ={"KNOWLEDGE_AGENT_CONFIG_DIR": str(user_config)}
    )
    assert settings.backend is None and settings.read_backend is None
    assert settings.warning is not None
    assert "[backend] url" in settings.warning and "[backend] read_url" in settings.warning
    assert settings.data_dir == tmp_path / ".knowledge-agent"  # still the project's folder


def test_a_bad_url_names_where_it_came_from(tmp_path: Path, user_config: Path) -> None:
    env = {"KNOWLEDGE_AGENT_CONFIG_DIR": str(user_config), ENV_BACKEND: "mysql://u:s3cret@h/db"}
    with pytest.raises(ConfigError, match=r"^\$KNOWLEDGE_AGENT_BACKEND: ") as caught:
        resolve_settings(cwd=tmp_path, environ=env)
    assert "s3cret" not in str(caught.value)
    toml = write(tmp_path / "p" / CONFIG_FILE_NAME, '[backend]\nurl = "redis://h"\n')
    with pytest.raises(ConfigError, match=r"backend\.url"):
        load_config(toml)
    with pytest.raises(ConfigError, match=r"backend\.host"):
        load_config(write(toml, '[backend]\nhost = "h"\n'))


def test_the_command_line_refuses_a_bad_backend_in_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(ENV_HOME, raising=False)
    result = CliRunner().invoke(
        cli, ["--data-dir", str(tmp_path / "d"), "--backend", "mysql://u:s3cret@h/db", "stats"]
    )
    assert result.exit_code != 0
    assert result.stderr.count("\n") == 1 and "--backend" in result.stderr
    assert "s3cret" not in result.output + result.stderr
    assert not (tmp_path / "d").exists()  # nothing created for a refused backend
