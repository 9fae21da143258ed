"""``judge_from_env``: the one rule for the judge named by the environment, with real variables; and
``judges_from_env``: that judge and a second one (``ART_ADAPTERS_JUDGE_*_2``) for an ensemble.

Model: argument, else ``$ART_ADAPTERS_JUDGE_MODEL``, else ``gpt-4o-mini`` with ``$OPENAI_API_KEY``, else
none. Endpoint: argument, else ``$ART_ADAPTERS_JUDGE_BASE_URL``, else the OpenAI API. Key: argument, else
``$ART_ADAPTERS_JUDGE_API_KEY``, else ``$OPENAI_API_KEY``, else a placeholder.
"""

from __future__ import annotations

import socket

import pytest

import art_adapters as aa
from art_adapters.ruler import judge_from_env, judges_from_env
from tests.helpers.judge_server import JudgeServer

VARIABLES = (
    "ART_ADAPTERS_JUDGE_MODEL", "ART_ADAPTERS_JUDGE_BASE_URL", "ART_ADAPTERS_JUDGE_API_KEY", "OPENAI_API_KEY",
    "ART_ADAPTERS_JUDGE_MODEL_2", "ART_ADAPTERS_JUDGE_BASE_URL_2", "ART_ADAPTERS_JUDGE_API_KEY_2",
)  # fmt: skip


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    """Start every test with none of the judge variables set."""
    for name in VARIABLES:
        monkeypatch.delenv(name, raising=False)
    return monkeypatch


def key_of(judge: object) -> str:
    return judge.openai_api_key.get_secret_value()  # type: ignore[attr-defined]


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]  # nobody listens once it is closed


def test_nothing_set_means_no_judge(clean_env: pytest.MonkeyPatch) -> None:
    assert judge_from_env() is None
    clean_env.setenv("ART_ADAPTERS_JUDGE_MODEL", "  ")  # blank is unset (how the demo test turns it off)
    clean_env.setenv("ART_ADAPTERS_JUDGE_API_KEY", "sk-unused")  # a key alone names no model
    assert judge_from_env() is None


def test_the_judge_variables_name_model_endpoint_and_key(clean_env: pytest.MonkeyPatch) -> None:
    clean_env.setenv("ART_ADAPTERS_JUDGE_MODEL", "judge-x")
    clean_env.setenv("ART_ADAPTERS_JUDGE_BASE_URL", "http://user:secret@127.0.0.1:9/v1")
    clean_env.setenv("ART_ADAPTERS_JUDGE_API_KEY", "judge-key")
    clean_env.setenv("OPENAI_API_KEY", "openai-key")
    found = judge_from_env()
    assert found is not None
    judge, line = found
    assert judge.model_name == "judge-x" and judge.temperature == 0.0
    assert judge.openai_api_base == "http://user:secret@127.0.0.1:9/v1" and key_of(judge) == "judge-key"
    assert line == "judge-x at http://127.0.0.1:9/v1 ($ART_ADAPTERS_JUDGE_MODEL)"  # no credentials
    clean_env.delenv("ART_ADAPTERS_JUDGE_API_KEY")
    judge, _ = judge_from_env(temperature=0.8) or (None, "")
    assert key_of(judge) == "openai-key" and judge.temperature == 0.8  # $OPENAI_API_KEY is the next key
    clean_env.delenv("OPENAI_API_KEY")
    judge, _ = judge_from_env() or (None, "")
    assert key_of(judge) == "not-needed"  # a local endpoint needs none


def test_openai_api_key_alone_is_gpt_4o_mini_on_the_openai_api(clean_env: pytest.MonkeyPatch) -> None:
    clean_env.setenv("OPENAI_API_KEY", "openai-key")
    judge, line = judge_from_env() or (None, "")
    assert judge.model_name == "gpt-4o-mini" and key_of(judge) == "openai-key"
    assert line == "gpt-4o-mini at the OpenAI API ($OPENAI_API_KEY)"


def test_arguments_override_each_variable(clean_env: pytest.MonkeyPatch) -> None:
    clean_env.setenv("ART_ADAPTERS_JUDGE_MODEL", "env-judge")
    clean_env.setenv("ART_ADAPTERS_JUDGE_BASE_URL", "http://127.0.0.1:9/v1")
    clean_env.setenv("ART_ADAPTERS_JUDGE_API_KEY", "env-key")
    judge, line = judge_from_env("flag-judge") or (None, "")
    assert judge.model_name == "flag-judge" and key_of(judge) == "env-key"  # the rest still from the env
    assert line == "flag-judge at http://127.0.0.1:9/v1"
    judge, line = judge_from_env("flag-judge", base_url="https://judge.example/v1", api_key="flag-key") or (
        None, "",
    )  # fmt: skip
    assert judge.openai_api_base == "https://judge.example/v1" and key_of(judge) == "flag-key"


@pytest.mark.parametrize(
    ("variables", "arguments", "message"),
    [
        ({"ART_ADAPTERS_JUDGE_BASE_URL": "http://127.0.0.1:9/v1"}, {},
         r"\$ART_ADAPTERS_JUDGE_BASE_URL is set \(http://127.0.0.1:9/v1\) but no judge model is"),
        ({"ART_ADAPTERS_JUDGE_BASE_URL": "http://127.0.0.1:9/v1", "OPENAI_API_KEY": "k"}, {},
         "no judge model is: set \\$ART_ADAPTERS_JUDGE_MODEL"),  # not gpt-4o-mini at someone else's endpoint
        ({"ART_ADAPTERS_JUDGE_MODEL": "j", "ART_ADAPTERS_JUDGE_BASE_URL": "127.0.0.1:8000/v1"}, {},
         r"\$ART_ADAPTERS_JUDGE_BASE_URL must be an http\(s\) URL .* got '127.0.0.1:8000/v1'"),
        ({}, {"model": "j", "base_url": "ftp://u:p@host/v1"},
         r"base_url must be an http\(s\) URL .*'ftp://host/v1'"),
    ],
)  # fmt: skip
def test_an_invalid_setting_is_a_config_error_naming_it(
    clean_env: pytest.MonkeyPatch, variables: dict[str, str], arguments: dict[str, str], message: str
) -> None:
    for name, value in variables.items():
        clean_env.setenv(name, value)
    with pytest.raises(aa.ConfigError, match=message):
        judge_from_env(**arguments)


async def test_the_env_judge_scores_a_group_and_an_unreachable_one_says_where(
    clean_env: pytest.MonkeyPatch,
) -> None:
    """Through RULER: the configured endpoint is the one asked; one nobody listens on fails with a
    JudgeError naming the model and the endpoint (without its credentials) after the retries."""
    question = aa.Message(role="user", content="2+3?")
    group = aa.TrajectoryGroup(
        trajectories=[
            aa.Trajectory(messages=[question, aa.Message(role="assistant", content=a)])
            for a in ("5", "6")
        ]
    )
    clean_env.setenv("ART_ADAPTERS_JUDGE_MODEL", "scripted-judge")
    with JudgeServer() as server:
        clean_env.setenv("ART_ADAPTERS_JUDGE_BASE_URL", server.url)
        judge, _ = judge_from_env() or (None, "")
        scored = await aa.ruler_score_group(group, judge, cache=False)
        assert [t.reward for t in scored.trajectories] and server.requests[0]["model"] == "scripted-judge"
    unreachable = f"http://user:secret@127.0.0.1:{closed_port()}/v1"
    clean_env.setenv("ART_ADAPTERS_JUDGE_BASE_URL", unreachable)
    judge, _ = judge_from_env() or (None, "")
    judge = judge.model_copy(update={"max_retries": 0})  # the client's own backoff only slows the test
    with pytest.raises(aa.JudgeError) as caught:
        await aa.ruler_score_group(group, judge, cache=False, max_retries=1)
    text = str(caught.value)
    assert "scripted-judge@http://127.0.0.1:" in text and "secret" not in text
    assert "ConnectionError: Connection error" in text
    assert "after 2 attempt(s)" in text


def test_judges_from_env_is_the_first_judge_alone_without_a_second(clean_env: pytest.MonkeyPatch) -> None:
    assert judges_from_env() == []
    clean_env.setenv("ART_ADAPTERS_JUDGE_MODEL", "judge-x")
    clean_env.setenv("ART_ADAPTERS_JUDGE_MODEL_2", " ")  # blank: unset
    ((judge, line),) = judges_from_env(temperature=0.3)
    assert judge.model_name == "judge-x" and judge.temperature == 0.3
    assert line == "judge-x at the OpenAI API ($ART_ADAPTERS_JUDGE_MODEL)"


def test_the_second_judge_has_its_own_model_endpoint_and_key(clean_env: pytest.MonkeyPatch) -> None:
    clean_env.setenv("ART_ADAPTERS_JUDGE_MODEL", "judge-x")
    clean_env.setenv("ART_ADAPTERS_JUDGE_BASE_URL", "http://127.0.0.1:9/v1")
    clean_env.setenv("ART_ADAPTERS_JUDGE_API_KEY", "first-key")
    clean_env.setenv("ART_ADAPTERS_JUDGE_MODEL_2", "judge-y")
    clean_env.setenv("ART_ADAPTERS_JUDGE_BASE_URL_2", "http://user:secret@127.0.0.1:10/v1")
    clean_env.setenv("ART_ADAPTERS_JUDGE_API_KEY_2", "second-key")
    (first, first_line), (second, second_line) = judges_from_env()
    assert first.model_name == "judge-x" and key_of(first) == "first-key"
    assert first_line == "judge-x at http://127.0.0.1:9/v1 ($ART_ADAPTERS_JUDGE_MODEL)"
    assert second.model_name == "judge-y" and second.temperature == 0.0
    assert second.openai_api_base == "http://user:secret@127.0.0.1:10/v1"
    assert key_of(second) == "second-key"
    assert second_line == "judge-y at http://127.0.0.1:10/v1 ($ART_ADAPTERS_JUDGE_MODEL_2)"  # no credentials
    # without its own key: $OPENAI_API_KEY, else the placeholder; never the first endpoint's key
    clean_env.delenv("ART_ADAPTERS_JUDGE_API_KEY_2")
    assert key_of(judges_from_env()[1][0]) == "not-needed"
    clean_env.setenv("OPENAI_API_KEY", "openai-key")
    assert key_of(judges_from_env()[1][0]) == "openai-key"
    # without its own endpoint: the OpenAI API, not the first judge's
    clean_env.delenv("ART_ADAPTERS_JUDGE_BASE_URL_2")
    second, line = judges_from_env()[1]
    assert second.openai_api_base is None
    assert line == "judge-y at the OpenAI API ($ART_ADAPTERS_JUDGE_MODEL_2)"


def test_the_second_judge_beside_gpt_4o_mini_from_the_openai_key(clean_env: pytest.MonkeyPatch) -> None:
    clean_env.setenv("OPENAI_API_KEY", "openai-key")
    clean_env.setenv("ART_ADAPTERS_JUDGE_MODEL_2", "gpt-4.1-mini")
    lines = [line for _, line in judges_from_env()]
    assert lines == [
        "gpt-4o-mini at the OpenAI API ($OPENAI_API_KEY)",
        "gpt-4.1-mini at the OpenAI API ($ART_ADAPTERS_JUDGE_MODEL_2)",
    ]


@pytest.mark.parametrize(
    ("variables", "message"),
    [
        ({"ART_ADAPTERS_JUDGE_MODEL_2": "judge-y"},
         r"\$ART_ADAPTERS_JUDGE_MODEL_2 is set \(judge-y\) but there is no first judge: "
         r"set \$ART_ADAPTERS_JUDGE_MODEL"),
        ({"ART_ADAPTERS_JUDGE_MODEL": "j", "ART_ADAPTERS_JUDGE_BASE_URL_2": "http://u:p@127.0.0.1:9/v1"},
         r"\$ART_ADAPTERS_JUDGE_BASE_URL_2 is set \(http://127.0.0.1:9/v1\) "
         r"but \$ART_ADAPTERS_JUDGE_MODEL_2 is not"),
        ({"ART_ADAPTERS_JUDGE_MODEL": "j", "ART_ADAPTERS_JUDGE_MODEL_2": "k",
          "ART_ADAPTERS_JUDGE_BASE_URL_2": "127.0.0.1:9/v1"},
         r"\$ART_ADAPTERS_JUDGE_BASE_URL_2 must be an http\(s\) URL"),
        ({"ART_ADAPTERS_JUDGE_MODEL": "j", "ART_ADAPTERS_JUDGE_BASE_URL": "http://127.0.0.1:9/v1",
          "ART_ADAPTERS_JUDGE_MODEL_2": "j", "ART_ADAPTERS_JUDGE_BASE_URL_2": "http://127.0.0.1:9/v1"},
         r"names the first judge again \(j at http://127.0.0.1:9/v1\).*RulerConfig.samples"),
    ],
)  # fmt: skip
def test_a_bad_second_judge_is_a_config_error_naming_the_variable(
    clean_env: pytest.MonkeyPatch, variables: dict[str, str], message: str
) -> None:
    for name, value in variables.items():
        clean_env.setenv(name, value)
    with pytest.raises(aa.ConfigError, match=message):
        judges_from_env()
