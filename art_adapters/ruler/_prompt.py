"""The judge's prompt for one group: shared prefix once, each distinct remainder once.

Pure functions, no I/O. A group's rollouts mostly repeat each other (same system prompt, same task,
sometimes the same answer): written out once, the judge reads fewer tokens and compares what differs.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from .._trajectory import Message, Trajectory, TrajectoryGroup

__all__ = [
    "DEFAULT_RUBRIC",
    "PROMPT_VERSION",
    "JudgeRequest",
    "answer_schema",
    "assistant_turns",
    "build_request",
]

#: Bumped whenever the prompt's wording or layout changes, so cached scores are not reused.
PROMPT_VERSION = 1

#: The rubric used when none is given: relative, goal-first, efficiency second, partial credit.
DEFAULT_RUBRIC = """\
- A trajectory that achieves its goal must score clearly higher than one that does not.
- Between trajectories that achieve the goal, the more efficient one (fewer wasted steps, \
no unnecessary or failed tool calls) scores higher.
- Give partial credit for real progress towards the goal; wrong answers, invented facts \
and ignored instructions lose credit.
- Small differences in quality get small differences in score; large ones, large ones.
- Scores lie between 0 and 1 and are comparable within this group only."""

_SYSTEM = """\
You are a careful judge of AI agent runs. Every trajectory below was produced by the same \
agent for the same task. Compare them with each other and give each a score from 0 to 1 \
following this rubric:

{rubric}

Answer with a JSON object only, no other text."""

_INSTRUCTIONS = """\
Score every trajectory. Answer with JSON only, in this form:
{{"scores": [{{"trajectory_id": "{first}", "explanation": "<one or two sentences>", "score": <0..1>}}, ...]}}
with exactly one entry for each of these trajectory ids: {ids}."""

_ANSWER_ONLY = "\n\nAnswer with a JSON object only, no other text."

# per_turn=True: the same system prompt with one paragraph on turn scores before its last line, and
# its own answer format.
_TURN_SYSTEM = """

Also score each assistant turn of every trajectory (the messages headed "### assistant (turn N)") \
from 0 to 1 by what that turn contributed: 1 for a turn that moved the run towards the goal (a \
needed, correct step or the right answer), 0 for one that hurt it (a wrong or wasted tool call, an \
invented fact, a wrong answer), partial credit in between. A turn's score is about that turn, not \
the whole run: a good turn in a failed run can score high, a bad turn in a successful run low."""

_TURN_INSTRUCTIONS = """\
Score every trajectory and every assistant turn in it. Answer with JSON only, in this form:
{{"scores": [{{"trajectory_id": "{first}", "explanation": "<one or two sentences>", "score": <0..1>, \
"turn_scores": [<turn 1: 0..1>, <turn 2: 0..1>, ...]}}, ...]}}
with exactly one entry for each of these trajectory ids: {ids}; turn_scores lists one score per \
assistant turn, in order, so {counts}."""

# dimensions=...: the rubric is followed by the dimensions to score, and the answer gives a
# "dimensions" object per trajectory instead of one "score".
_DIMENSION_SYSTEM = """

Score every trajectory on each of these dimensions separately, each from 0 to 1 (no overall score):
{dimensions}"""

_DIMENSION_INSTRUCTIONS = """\
Score every trajectory on every dimension{and_turns}. Answer with JSON only, in this form:
{{"scores": [{{"trajectory_id": "{first}", "explanation": "<one or two sentences>", \
"dimensions": {{{example}}}{turn_example}}}, ...]}}
with exactly one entry for each of these trajectory ids: {ids}; dimensions gives each of {names} \
a score from 0 to 1{turn_rule}."""


@dataclass
class JudgeRequest:
    """What is sent to the judge for one group, and how to map its answer back.

    Attributes:
        messages: the chat messages (``{"role", "content"}``) to send.
        schema: the JSON schema of a valid answer (ids constrained to ``labels``).
        labels: the trajectory ids the judge sees (``t1``, ``t2``, ...), one per distinct
            trajectory, in order.
        members: for each label, the indexes of the group's trajectories it stands for.
        prefix_messages: how many leading messages were sent once in ``<context>``.
        per_turn: whether the judge is asked for a score per assistant turn too.
        turns: with ``per_turn``, each label's number of assistant turns (of the main
            history), i.e. how many ``turn_scores`` a valid answer gives it.
        dimensions: with rubric dimensions, their names and weights (a valid answer scores each
            trajectory on exactly these); ``None`` otherwise.
    """

    messages: list[dict[str, str]]
    schema: dict[str, Any]
    labels: list[str]
    members: dict[str, list[int]] = field(default_factory=dict)
    prefix_messages: int = 0
    per_turn: bool = False
    turns: dict[str, int] = field(default_factory=dict)
    dimensions: dict[str, float] | None = None

    def label_of(self, index: int) -> str:
        """The label that trajectory ``index`` of the group was sent under."""
        for label, indexes in self.members.items():
            if index in indexes:
                return label
        raise KeyError(index)


def answer_schema(
    labels: list[str],
    max_explanation_chars: int | None = None,
    turns: dict[str, int] | None = None,
    dimensions: list[str] | None = None,
) -> dict[str, Any]:
    """The JSON schema of the judge's answer: one score per label, ids from ``labels`` only.

    ``max_explanation_chars`` bounds each explanation (``maxLength``), which keeps a
    schema-constrained small judge from rambling until it runs out of tokens. ``turns`` (label ->
    assistant turns; per-turn scoring) adds a required ``turn_scores`` array of scores in [0, 1],
    between the fewest and the most turns long (the exact count per label is checked on parsing).
    ``dimensions`` (rubric dimension names) replaces ``score`` by a required ``dimensions`` object
    with exactly those keys, each a score in [0, 1].
    """
    explanation: dict[str, Any] = {"type": "string"}
    if max_explanation_chars is not None:
        explanation["maxLength"] = max_explanation_chars
    score = {"type": "number", "minimum": 0, "maximum": 1}
    properties: dict[str, Any] = {
        "trajectory_id": {"type": "string", "enum": list(labels)},
        "explanation": explanation,
    }
    if dimensions is None:
        properties["score"] = score
        required = ["trajectory_id", "explanation", "score"]
    else:
        properties["dimensions"] = {
            "type": "object",
            "properties": {name: dict(score) for name in dimensions},
            "required": list(dimensions),
            "additionalProperties": False,
        }
        required = ["trajectory_id", "explanation", "dimensions"]
    if turns is not None:
        counts = [turns[label] for label in labels]
        properties["turn_scores"] = {
            "type": "array",
            "items": {"type": "number", "minimum": 0, "maximum": 1},
            "minItems": min(counts),
            "maxItems": max(counts),
        }
        required.append("turn_scores")
    return {
        "type": "object",
        "properties": {
            "scores": {
                "type": "array",
                "items": {
                    "type": "object",
                    "properties": properties,
                    "required": required,
                    "additionalProperties": False,
                },
                "minItems": len(labels),
                "maxItems": len(labels),
            }
        },
        "required": ["scores"],
        "additionalProperties": False,
    }


def _text(content: str | list[dict[str, Any]] | None) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    parts = []
    for block in content:
        if block.get("type") == "text":
            parts.append(str(block.get("text", "")))
        else:
            parts.append(f"[{block.get('type', 'block')}]")
    return "\n".join(parts)


def render_message(message: Message, turn: int | None = None) -> str:
    """One message as the judge reads it: a ``### role`` header, the text, tool calls.

    ``turn`` numbers an assistant message for per-turn scoring: ``### assistant (turn 2)``.
    """
    header = f"### {message.role}"
    if message.role == "tool" and message.name:
        header += f" ({message.name})"
    if turn is not None:
        header += f" (turn {turn})"
    lines = [header]
    text = _text(message.content).strip()
    if text:
        lines.append(text)
    for call in message.tool_calls or []:
        lines.append(f"tool_call {call.function.name}({call.function.arguments})")
    return "\n".join(lines)


def _render_tools(trajectory: Trajectory) -> str:
    if not trajectory.tools:
        return ""
    lines = ["### tools offered"]
    for tool in trajectory.tools:
        description = str(tool.function.get("description", "")).strip().splitlines()
        lines.append(f"- {tool.name}: {description[0] if description else ''}".rstrip(": "))
    return "\n".join(lines)


def _common_prefix(rendered: list[list[str]]) -> int:
    if not rendered:
        return 0
    length = min(len(r) for r in rendered)
    for position in range(length):
        first = rendered[0][position]
        if any(r[position] != first for r in rendered[1:]):
            return position
    return length


def _body(trajectory: Trajectory, rendered: list[str], start: int, *, tools: bool) -> str:
    parts = []
    if tools and (tool_text := _render_tools(trajectory)):
        parts.append(tool_text)
    parts.extend(rendered[start:])
    if not rendered[start:]:
        parts.append("(no further messages)")
    if trajectory.error:
        parts.append(f"### run ended with an error\n{trajectory.error}")
    return "\n\n".join(parts)


def _numbered(messages: list[Message]) -> list[str]:
    """The messages rendered with their assistant turns numbered 1, 2, ... (per-turn scoring)."""
    out: list[str] = []
    turn = 0
    for message in messages:
        if message.role == "assistant":
            turn += 1
            out.append(render_message(message, turn))
        else:
            out.append(render_message(message))
    return out


def assistant_turns(trajectory: Trajectory) -> int:
    """How many assistant messages the trajectory's main history holds (the turns scored per turn)."""
    return sum(message.role == "assistant" for message in trajectory.messages)


def build_request(
    group: TrajectoryGroup,
    rubric: str,
    *,
    dedup: bool = True,
    max_explanation_chars: int | None = None,
    per_turn: bool = False,
    dimensions: dict[str, float] | None = None,
    dimension_rubrics: dict[str, str] | None = None,
) -> JudgeRequest:
    """Render ``group`` for the judge: two chat messages, the answer's schema, and the label map.

    The system message holds the judge's role and the rubric; the user message the shared context,
    then one ``<trajectory id="tN">`` block per *distinct* trajectory, then the answer format. The
    request remembers which trajectories each label stands for (:meth:`JudgeRequest.label_of`).

    With ``dedup=True`` (the default) the messages that every trajectory of the group starts with
    (typically the system prompt and the task), and the tool list when all offer the same tools,
    are written once in ``<context>``, and trajectories whose remainders are identical share one
    label, so the judge reads each distinct piece of text once. ``dedup=False`` writes every
    trajectory out in full; it exists to measure what deduplication saves (``bench/ruler.py``).

    Args:
        group: the group to score; it must hold at least one trajectory.
        rubric: the scoring rubric, inserted into the system message.
        dedup: send the shared prefix once and identical trajectories once.
        max_explanation_chars: bound on each explanation in the answer schema.
        per_turn: also ask for one score per assistant turn of each trajectory's main history:
            assistant messages are headed ``### assistant (turn N)``, the shared ``<context>``
            stops before the first assistant message (so every turn is inside its trajectory's
            block), and the answer format asks for ``turn_scores`` with each label's turn count
            (:attr:`JudgeRequest.turns`).
        dimensions: rubric dimensions (name -> weight): the system message lists them after the
            rubric (each with its ``dimension_rubrics`` text, if any), and the answer gives every
            trajectory a ``dimensions`` object with one score per dimension instead of a ``score``.
            ``None``: the prompt is exactly the one-score one.
        dimension_rubrics: what each dimension means (name -> plain words).
    """
    trajectories = group.trajectories
    if not trajectories:
        raise ValueError(f"group {group.id} has no trajectories to score")
    if per_turn:
        rendered = [_numbered(t.messages) for t in trajectories]
    else:
        rendered = [[render_message(m) for m in t.messages] for t in trajectories]
    prefix = _common_prefix(rendered) if dedup else 0
    if per_turn:  # the context holds no assistant turn: each is scored inside its trajectory
        roles = [m.role for m in trajectories[0].messages]
        prefix = min(prefix, roles.index("assistant") if "assistant" in roles else prefix)
    tool_sets = {
        json.dumps([tool.model_dump(mode="json") for tool in t.tools or []], sort_keys=True)
        for t in trajectories
    }
    shared_tools = dedup and len(tool_sets) == 1
    bodies = [
        _body(t, r, prefix, tools=not shared_tools) for t, r in zip(trajectories, rendered, strict=True)
    ]
    members = _labelled(bodies, dedup)
    labels = list(members)
    sections = _context_sections(trajectories[0] if shared_tools else None, rendered[0][:prefix])
    sections += [f'<trajectory id="{label}">\n{bodies[members[label][0]]}\n</trajectory>' for label in labels]
    turns = {label: assistant_turns(trajectories[members[label][0]]) for label in labels} if per_turn else {}
    system, instructions = _system_and_instructions(rubric, labels, turns, dimensions, dimension_rubrics)
    return JudgeRequest(
        messages=[
            {"role": "system", "content": system},
            {"role": "user", "content": "\n\n".join([*sections, instructions])},
        ],
        schema=answer_schema(
            labels,
            max_explanation_chars,
            turns if per_turn else None,
            list(dimensions) if dimensions is not None else None,
        ),
        labels=labels,
        members=members,
        prefix_messages=prefix,
        per_turn=per_turn,
        turns=turns,
        dimensions=dict(dimensions) if dimensions is not None else None,
    )


def _labelled(bodies: list[str], dedup: bool) -> dict[str, list[int]]:
    """Label -> the indexes of the trajectories it stands for (``t1``, ``t2``, ... in order of first
    appearance); with ``dedup`` identical bodies share a label."""
    members: dict[str, list[int]] = {}
    label_by_body: dict[str, str] = {}
    for index, body in enumerate(bodies):
        key = body if dedup else f"{index}\0{body}"
        label = label_by_body.get(key)
        if label is None:
            label = label_by_body[key] = f"t{len(label_by_body) + 1}"
            members[label] = []
        members[label].append(index)
    return members


def _context_sections(tools_of: Trajectory | None, shared: list[str]) -> list[str]:
    """The ``<context>`` section (the shared tool list of ``tools_of``, then the ``shared`` messages),
    or nothing when there is nothing shared."""
    parts = []
    if tools_of is not None and (tool_text := _render_tools(tools_of)):
        parts.append(tool_text)
    parts.extend(shared)
    if not parts:
        return []
    joined = "\n\n".join(parts)
    heading = "Context shared by every trajectory (each one continues from here):"
    return [f"{heading}\n<context>\n{joined}\n</context>"]


def _system_and_instructions(
    rubric: str,
    labels: list[str],
    turns: dict[str, int],
    dimensions: dict[str, float] | None,
    dimension_rubrics: dict[str, str] | None,
) -> tuple[str, str]:
    """The system message and the answer instructions: one score per trajectory, per turn too when
    ``turns`` is given (per-turn scoring), or one per dimension."""
    system = _SYSTEM.format(rubric=rubric.strip())
    counts = ", ".join(f"{label} has {turns[label]}" for label in labels) if turns else ""
    if turns:
        system = system.removesuffix(_ANSWER_ONLY) + _TURN_SYSTEM + _ANSWER_ONLY
    if dimensions is not None:
        listed = _dimension_system(dimensions, dimension_rubrics)
        system = system.removesuffix(_ANSWER_ONLY) + listed + _ANSWER_ONLY
        return system, _dimension_instructions(labels, list(dimensions), counts if turns else None)
    if turns:
        return system, _TURN_INSTRUCTIONS.format(first=labels[0], ids=", ".join(labels), counts=counts)
    return system, _INSTRUCTIONS.format(first=labels[0], ids=", ".join(labels))


def _dimension_system(dimensions: dict[str, float], rubrics: dict[str, str] | None) -> str:
    """The system message's paragraph listing the dimensions, each with what it means when given."""
    lines = []
    for name in dimensions:
        meaning = ((rubrics or {}).get(name) or "").strip()
        lines.append(f"- {name}" + (f": {meaning}" if meaning else ""))
    return _DIMENSION_SYSTEM.format(dimensions="\n".join(lines))


def _dimension_instructions(labels: list[str], names: list[str], counts: str | None) -> str:
    """The answer format with a ``dimensions`` object per trajectory (and ``turn_scores`` per turn)."""
    turn_rule = f"; turn_scores lists one score per assistant turn, in order, so {counts}"
    return _DIMENSION_INSTRUCTIONS.format(
        and_turns="" if counts is None else " and every assistant turn",
        first=labels[0],
        example=", ".join(f'"{name}": <0..1>' for name in names),
        turn_example="" if counts is None else ', "turn_scores": [<turn 1: 0..1>, <turn 2: 0..1>, ...]',
        ids=", ".join(labels),
        names=", ".join(names),
        turn_rule="" if counts is None else turn_rule,
    )
