"""A ``session.created`` record seals to the bytes its whole canonical encoding gives, though
its environment is encoded once for every session that shares it."""

from __future__ import annotations

import msgspec

from envharness.records import EnvironmentRef, SessionChain, SessionCreated
from envharness.records.payloads import ScenarioRef

from .test_payloads import CONFIG

WHOLE = msgspec.json.Encoder(order="sorted")

OTHER_ENVIRONMENT = EnvironmentRef(
    name="other",
    version="2",
    turn_order="sequential",
    roles=("b", "a"),
    input_type="builtins.dict",
    input_schema={"z": 1, "a": {"y": [3, {"c": None, "b": True}]}},
)


def sealed(payload: SessionCreated) -> bytes:
    return SessionChain("ses_1").seal(payload).payload


def test_sessions_sharing_an_environment_seal_what_encoding_them_whole_gives() -> None:
    for index in range(3):
        config = msgspec.structs.replace(
            CONFIG, seed=index, scenario=ScenarioRef(id=f"s-{index}", input={"n": index})
        )
        payload = SessionCreated(config=config)
        assert sealed(payload) == WHOLE.encode(payload)


def test_a_change_of_environment_is_encoded_anew_each_time() -> None:
    equal_but_not_the_same = msgspec.json.decode(
        msgspec.json.encode(CONFIG.environment), type=EnvironmentRef
    )
    for environment in (CONFIG.environment, OTHER_ENVIRONMENT, CONFIG.environment,
                        equal_but_not_the_same, OTHER_ENVIRONMENT):  # fmt: skip
        payload = SessionCreated(config=msgspec.structs.replace(CONFIG, environment=environment))
        assert sealed(payload) == WHOLE.encode(payload)
        assert msgspec.json.decode(sealed(payload), type=SessionCreated) == payload
