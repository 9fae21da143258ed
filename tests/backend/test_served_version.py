"""A response names the checkpoint that answered: ``name`` resolves to the latest step, and the
body (streamed or not) says ``name@step``, so a captured turn records the exact policy version.

The real app on the fake engine and trainer (``fake_backend``): resolution and naming are the subject.
"""

from __future__ import annotations

from typing import Any

from art_adapters import TrainableModel, Trajectory, TrajectoryGroup
from art_adapters._trajectory import Message
from tests.helpers.fake_backend import FakeBackend

ASK = [{"role": "user", "content": "What is 2 + 3?"}]


async def answer(model: TrainableModel, served: str, **kw: Any) -> tuple[str, Trajectory]:
    client = model.openai_client()
    response = await client.chat.completions.create(model=served, messages=ASK, max_tokens=4, temperature=1.0, **kw)
    reply = response.choices[0].message
    turn = Message(role="assistant", content=reply.content, completion_id=response.id, model=response.model)
    return response.model, Trajectory(messages=[Message(role="user", content=ASK[0]["content"]), turn], reward=0.0)


async def test_name_resolves_to_the_latest_step_and_the_response_says_which(fake_backend: FakeBackend) -> None:
    model = TrainableModel(name="versioned", project="tests")
    await model.register(fake_backend)
    named, first = await answer(model, "versioned")
    assert named == "versioned@0"
    _, second = await answer(model, "versioned")
    first.reward, second.reward = 0.0, 1.0
    trained = await model.train([TrajectoryGroup(trajectories=[first, second])])
    assert trained.trained and trained.step == 1
    assert (await answer(model, "versioned"))[0] == "versioned@1"  # the new checkpoint, once served
    assert (await answer(model, "versioned@0"))[0] == "versioned@0"  # an older one stays servable

    client = model.openai_client()
    stream = await client.chat.completions.create(model="versioned", messages=ASK, max_tokens=3, stream=True)
    names = {chunk.model async for chunk in stream}
    assert names == {"versioned@1"}
