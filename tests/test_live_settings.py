"""Live settings: what `apply_setting` says is in effect now must be, and what the engine reads anew
each turn must not be reported as waiting for a restart (the window's status line shows that list)."""

from engine.api.assistant import LIVE_SETTINGS
from engine.api.engine_config import CONFIG_SETTINGS, engine_config, reasoning_options
from engine.config.settings import CHOICES, DEFAULTS, Settings

# CONFIG_SETTINGS keys that deliberately wait for a restart, each with its reason. None today.
NOT_LIVE: dict[str, str] = {}


def changed(key):
    """A valid value other than the default, of the default's type."""
    default = DEFAULTS[key]
    if key in CHOICES:
        return next(choice for choice in CHOICES[key] if choice != default)
    if isinstance(default, bool):
        return not default
    if default:
        return default * 2
    return 0.5 if isinstance(default, float) else 1


def test_every_config_setting_is_applied_live_or_excluded_with_a_reason():
    assert set(CONFIG_SETTINGS) - set(NOT_LIVE) <= LIVE_SETTINGS, "apply_setting would say 'next start'"
    assert not set(NOT_LIVE) & LIVE_SETTINGS


def test_settings_read_per_turn_are_live():
    # Front-ends read these into each turn's GenerateParams (app/engine_worker.py turn_params),
    # so a change is in effect from the next turn whatever apply_setting does.
    read = []

    class Recording:
        def get(self, key):
            read.append(key)
            return DEFAULTS[key]

    reasoning_options(Recording())
    per_turn = set(read) | {"generate.repetition_guard"}
    assert per_turn <= LIVE_SETTINGS, sorted(per_turn - LIVE_SETTINGS)


def test_a_live_change_sets_the_field_a_restart_would(tmp_path):
    settings = Settings(tmp_path / "settings.json")
    for key in CONFIG_SETTINGS:
        settings.set(key, changed(key))
    config = engine_config(settings, remote=None)
    for key, (field, convert) in CONFIG_SETTINGS.items():
        assert settings.get(key) != DEFAULTS[key], key  # the test really changed it
        assert getattr(config, field) == convert(settings.get(key)), key
