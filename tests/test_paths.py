"""Install folder vs user data: a frozen app reads its bundled models and writes only under the user's dir."""

import sys

import pytest

from engine.config import paths
from engine.models.catalog import load_catalog


@pytest.fixture
def frozen_app(tmp_path, monkeypatch):
    bundle = tmp_path / "bundle"
    (bundle / "models").mkdir(parents=True)
    (bundle / "models" / "catalog.toml").write_bytes(paths.catalog_path().read_bytes())
    monkeypatch.setattr(sys, "frozen", True, raising=False)
    monkeypatch.setattr(sys, "_MEIPASS", str(bundle), raising=False)
    monkeypatch.delenv(paths.MODELS_ENV, raising=False)
    return bundle


def test_frozen_app_reads_the_bundle_and_writes_under_the_user_dir(frozen_app, assistant_home):
    assert paths.install_dir() == frozen_app
    assert paths.catalog_path() == frozen_app / "models" / "catalog.toml"
    assert paths.models_dir() == assistant_home / "models"
    entry = load_catalog().default
    assert entry.path() == assistant_home / "models" / entry.file and not entry.present()

    (frozen_app / "models" / entry.file).write_bytes(b"GGUF")  # a bundled demo model
    assert entry.path() == frozen_app / "models" / entry.file
    assert entry.present() and not entry.removable()
    assert entry.download_path() == assistant_home / "models" / entry.file

    entry.download_path().parent.mkdir(parents=True)
    entry.download_path().write_bytes(b"GGUF")  # the user's own copy wins, and is theirs to delete
    assert entry.path() == entry.download_path() and entry.removable()


def test_source_checkout_keeps_models_in_the_repository(monkeypatch):
    monkeypatch.delenv(paths.MODELS_ENV, raising=False)
    assert not paths.frozen()
    assert paths.models_dir() == paths.install_models_dir() == paths.install_dir() / "models"
    assert (paths.install_dir() / "pyproject.toml").is_file()


def test_models_dir_override_is_the_only_place(tmp_path, monkeypatch):
    monkeypatch.setenv(paths.MODELS_ENV, str(tmp_path / "m"))
    entry = load_catalog().default
    assert entry.path() == tmp_path / "m" / entry.file  # even though the repo holds the demo file
