"""The L3 window: the same budget rules, counted with tiktoken and labelled as an estimate."""

import pytest

from engine.inference.events import GenerateParams
from engine.inference.remote import RemoteClient, RemoteConfig, estimate_prompt, estimate_tokens
from engine.chat.session import Message
from engine.chat.targets import InputError, RemoteTarget


@pytest.fixture
def target():
    client = RemoteClient(RemoteConfig("http://127.0.0.1:9/v1", n_ctx=600))
    yield RemoteTarget(client)
    client.close()


def test_remote_window_is_an_estimate_within_the_configured_context(target):
    system = [Message("system", "Be brief.")]
    turns = []
    for i in range(40):
        turns += [Message("user", f"question {i} about the weather in Paris"),
                  Message("assistant", f"answer {i}: it is mild and often grey in the autumn")]
    user = Message("user", "And tomorrow?", model_text="(memories)\nAnd tomorrow?")
    w = target.fit(system, turns, user, GenerateParams(max_tokens=100))
    assert w.estimated and w.as_dict()["estimated"] is True
    assert w.prompt_tokens == estimate_prompt(w.messages + [user]) <= 600 - 100
    assert w.messages[0] is system[0] and w.first_kept > 0 and w.messages[1:] == turns[w.first_kept:]
    # The memories the model reads are counted, not only what the user typed.
    assert estimate_prompt([user]) > estimate_tokens("And tomorrow?") + 4


def test_remote_message_too_long_is_refused_clearly(target):
    with pytest.raises(InputError, match="too long for the L3 model"):
        target.fit([], [], Message("user", "word " * 2_000), GenerateParams(max_tokens=100))
