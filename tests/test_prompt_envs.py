"""Tests of the LLM prompt environments (tpo_gym.prompts): extraction, verifiers, envs."""

from __future__ import annotations

import json
import subprocess
import sys
import warnings
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env

import tpo_gym  # noqa: F401  (registers the ids)
from tpo_gym.candidates import score_candidates, supports_candidate_scoring
from tpo_gym.prompts import (
    BASE_CHARSET,
    GSM8KEnv,
    GSM8KTask,
    PromptEnv,
    PromptEnvResetNeeded,
    PromptListEnv,
    PromptListTask,
    ReasoningGymEnv,
    ReasoningGymTask,
    TinyArithmeticEnv,
    TinyArithmeticTask,
    extract_answer,
    parse_number,
    reasoning_gym_task_names,
)

GSM8K_SAMPLE = Path(__file__).parent / "data" / "gsm8k_sample.jsonl"
RG_TASKS = ("graph_color", "knights_knaves", "basic_arithmetic", "chain_sum", "gsm_symbolic")


def tags(text: str) -> str:
    return f"<answer>{text}</answer>"


@pytest.fixture(scope="module")
def rg_envs() -> dict[str, ReasoningGymEnv]:
    return {task: ReasoningGymEnv(task, size=6, seed=3) for task in RG_TASKS}


@pytest.fixture()
def gsm8k_env() -> GSM8KEnv:
    return GSM8KEnv(GSM8K_SAMPLE)


# --------------------------------------------------------------------------- extraction


@pytest.mark.parametrize(
    ("text", "mode", "expected"),
    [
        ("think <answer> 12 </answer> then <answer>13</answer> end", "tags", "13"),
        ("<answer>\nmulti\nline\n</answer>", "tags", "multi\nline"),
        ("<answer></answer>", "tags", ""),
        ("<answer>42", "tags", None),
        ("no tags 42", "tags", None),
        ("steps\n#### 1,234\nbye", "hashes", "1,234"),
        ("#### 3 then #### 5", "hashes", "5"),
        ("####   \n", "hashes", None),
        ("#### Alice", "hashes", None),
        ("#### $1,500. Done", "hashes", "$1,500"),
        (r"so \boxed{\frac{1}{2}} done", "boxed", r"\frac{1}{2}"),
        (r"\boxed{1} and \boxed{ 7 }", "boxed", "7"),
        (r"\boxed{unclosed", "boxed", None),
        ("3-4 is -1, and 1,234,567 apples", "last_number", "1234567"),
        ("the total is -5.", "last_number", "-5"),
        ("3-4", "last_number", "4"),
        ("costs $2.50.", "last_number", "2.50"),
        ("no digits", "last_number", None),
        ("  7 and 8", "first_char", "7"),
        ("   ", "first_char", None),
        ("  keep this  ", "identity", "keep this"),
        ("x <answer>9</answer> #### 8", "auto", "9"),
        ("x #### 8 then 11", "auto", "8"),
        (r"x \boxed{6} then 11", "auto", "6"),
        ("x 6 then 11", "auto", "11"),
        ("nothing", "auto", None),
        ("7 #### 8", ("tags", "first_char"), "7"),
    ],
)
def test_extract_answer(text, mode, expected):
    assert extract_answer(text, mode) == expected


def test_extract_answer_bad_input():
    with pytest.raises(ValueError, match=r"unknown answer_format 'xml'.*valid formats"):
        extract_answer("x", "xml")
    with pytest.raises(ValueError, match="non-empty sequence"):
        extract_answer("x", ())
    with pytest.raises(ValueError, match="text must be a str, got int"):
        extract_answer(5, "tags")


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("1,234", 1234.0),
        (" $1,234. ", 1234.0),
        ("-$5", -5.0),
        ("0.50", 0.5),
        ("18.", 18.0),
        ("18 dollars", None),
        ("1e5", None),
        ("nan", None),
        ("", None),
        (None, None),
    ],
)
def test_parse_number(text, value):
    assert parse_number(text) == value


# --------------------------------------------------------------------------- GSM8K


@pytest.mark.parametrize(
    ("completion", "reward"),
    [
        ("125 boxes times 12 is 1500.\n#### 1,500", 1.0),
        ("<answer>$1,500.</answer>", 1.0),
        ("<answer> 1500.00 </answer>", 1.0),
        ("So the school buys 1500 pencils.", 1.0),  # last number
        (r"The answer is \boxed{1500}.", 1.0),
        ("<answer>1500</answer> and 7 more words", 1.0),  # tags win over the last number
        ("#### 1500 (then rambling 3)", 1.0),  # #### wins over the last number
        ("<answer>1500 pencils</answer>", 0.0),  # malformed: not a plain number
        ("I think 1500, no wait, 1400", 0.0),  # wrong: the last number counts
        ("<answer>1499</answer>", 0.0),
        ("", 0.0),  # empty
        ("no idea", 0.0),  # no number at all
    ],
)
def test_gsm8k_verifier(gsm8k_env, completion, reward):
    index = [r["answer"] for r in map(json.loads, GSM8K_SAMPLE.read_text().splitlines())].index(
        "It buys 125 * 12 = <<125*12=1500>>1,500 pencils.\n#### 1,500"
    )
    gsm8k_env.reset(options={"context": index})
    assert gsm8k_env.answer == "1500"
    assert gsm8k_env.score_candidates([completion])[0] == reward
    _, r, terminated, truncated, info = gsm8k_env.step(completion)
    assert (r, terminated, truncated, info["correct"]) == (reward, True, False, reward == 1.0)


def test_gsm8k_decimal_answer_and_source(gsm8k_env):
    task = gsm8k_env.source
    assert len(task) == 10
    i = task._answers.index("12.5")
    assert task.score(i, "each pays 12.50 dollars") == 1.0
    assert task.score(i, "#### 12") == 0.0
    meta = task.metadata(i)
    assert meta["row"] == i and meta["solution"].endswith("#### 12.5")
    _, info = gsm8k_env.reset(options={"context": i})
    assert info == {"task": "gsm8k", "index": i, "answer": "12.5", "metadata": meta}
    assert gsm8k_env.prompt.startswith("Three friends share a pizza bill")
    assert gsm8k_env.prompt.endswith("<answer></answer> tags.")


def test_gsm8k_parquet_matches_jsonl(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    rows = [json.loads(line) for line in GSM8K_SAMPLE.read_text().splitlines()]
    path = tmp_path / "gsm8k.parquet"
    pq.write_table(pa.Table.from_pylist(rows), path)
    from_parquet, from_jsonl = GSM8KTask(path, size=4), GSM8KTask(GSM8K_SAMPLE)
    assert len(from_parquet) == 4
    for i in range(4):
        assert from_parquet.prompt(i) == from_jsonl.prompt(i)
        assert from_parquet.answer(i) == from_jsonl.answer(i)
    env = gym.make("GSM8K-v0", path=str(path))
    _, info = env.reset(options={"context": 1})
    assert env.step(tags(info["answer"]))[1] == 1.0


def test_gsm8k_bad_files(tmp_path):
    missing = tmp_path / "nope.jsonl"
    with pytest.raises(
        FileNotFoundError, match=r"GSM8K file not found: '.*nope\.jsonl'.*never downloads"
    ):
        GSM8KTask(missing)
    with pytest.raises(FileNotFoundError, match="nope.jsonl"):
        gym.make("GSM8K-v0", path=str(missing))
    with pytest.raises(ValueError, match=r"GSM8K-v0 needs path="):
        gym.make("GSM8K-v0")
    csv = tmp_path / "g.csv"
    csv.write_text("question,answer\n")
    with pytest.raises(ValueError, match=r"unsupported GSM8K file type '\.csv'"):
        GSM8KTask(csv)
    no_hashes = tmp_path / "g.jsonl"
    no_hashes.write_text(json.dumps({"question": "q", "answer": "just 5"}) + "\n")
    with pytest.raises(ValueError, match=r"record 0's answer must end with '#### <number>'"):
        GSM8KTask(no_hashes)
    no_question = tmp_path / "h.jsonl"
    no_question.write_text(json.dumps({"prompt": "q", "answer": "#### 5"}) + "\n")
    with pytest.raises(ValueError, match=r"record 0 needs a str 'question' field"):
        GSM8KTask(no_question)
    broken = tmp_path / "b.jsonl"
    broken.write_text('{"question": "q", "answer": "#### 5"}\n{oops\n')
    with pytest.raises(ValueError, match="line 2 is not valid JSON"):
        GSM8KTask(broken)
    empty = tmp_path / "e.jsonl"
    empty.write_text("\n")
    with pytest.raises(ValueError, match="holds no records"):
        GSM8KTask(empty)


# --------------------------------------------------------------------------- Reasoning Gym

WRONG = {
    "graph_color": '{"0": 1, "1": 1, "2": 1, "3": 1, "4": 1, "5": 1, "6": 1, "7": 1, "8": 1, "9": 1}',
    "knights_knaves": None,  # built from the reference: swap knight and knave
    "basic_arithmetic": "123456789",
    "chain_sum": "123456789",
    "gsm_symbolic": "123456789",
}


def _swap_roles(answer: str, terms: dict[str, str]) -> str:
    """A wrong Knights & Knaves answer: every knight a knave and vice versa."""
    a_knight, a_knave = str(terms["a_knight"]), str(terms["a_knave"])
    return answer.replace(a_knight, "\0").replace(a_knave, a_knight).replace("\0", a_knave)


@pytest.mark.parametrize("task", RG_TASKS)
def test_reasoning_gym_verifiers(rg_envs, task):
    import reasoning_gym

    env = rg_envs[task]
    dataset = reasoning_gym.create_dataset(task, size=6, seed=3)
    for i in range(len(env.source)):
        _, info = env.reset(options={"context": i})
        assert env.source.prompt(i) == dataset[i]["question"]  # the same problems
        assert env.prompt.startswith(dataset[i]["question"].rstrip())
        assert info["task"] == task and info["index"] == i and isinstance(info["metadata"], dict)
        ref = info["answer"]
        assert ref  # every one of these tasks has a reference answer
        wrong = WRONG[task] or _swap_roles(ref, info["metadata"]["knight_knave_terms"])
        completions = [
            f"Let me think. {tags(ref)}",  # correct
            tags(wrong),  # wrong
            "",  # empty
            f"<answer>{ref}",  # malformed: unclosed tag
            ref,  # malformed: no tags at all
        ]
        rewards = env.score_candidates(completions)
        assert rewards.dtype == np.float64 and rewards.shape == (5,)
        assert rewards[0] == 1.0, (task, i, ref)
        assert rewards[1] < 1.0, (task, i, wrong)
        assert (rewards[2:] == 0.0).all(), (task, i, rewards)
        scores = [env.source.score(i, c) for c in completions]
        np.testing.assert_array_equal(np.float64(scores), rewards)
        for k, completion in enumerate(completions):  # step gives the same rewards
            env.reset(options={"context": i})
            _, r, terminated, truncated, info = env.step(completion)
            assert r == rewards[k] and terminated and not truncated
            assert info["correct"] == (k == 0)
    if task == "graph_color":  # a well-formed but invalid colouring gets partial credit
        env.reset(options={"context": 0})
        assert 0.0 < env.score_candidates([tags(WRONG[task])])[0] < 1.0


def test_reasoning_gym_registered_ids_and_any_name():
    for task in RG_TASKS:
        env = gym.make(f"ReasoningGym-{task}-v0", size=2)
        assert env.unwrapped.source.name == task and len(env.unwrapped.source) == 2
    assert "count_bits" in reasoning_gym_task_names()
    env = gym.make("ReasoningGym-v0", task="count_bits", size=3, seed=1)
    _, info = env.reset(seed=0)
    assert env.step(tags(info["answer"]))[1] == 1.0
    cfg = ReasoningGymTask(
        "graph_color", size=2, config={"min_num_vertices": 5, "max_num_vertices": 5}
    )
    assert cfg.metadata(0)["num_vertices"] == 5
    # tasks without a reference answer report "" and still verify
    assert ReasoningGymTask("propositional_logic", size=1).answer(0) == ""


def test_reasoning_gym_bad_input():
    with pytest.raises(
        ValueError,
        match=r"unknown Reasoning Gym task 'graph_colour'; did you mean "
        r"\['graph_color'.*registered tasks include \[.*'basic_arithmetic'",
    ):
        ReasoningGymTask("graph_colour")
    with pytest.raises(ValueError, match="unknown Reasoning Gym task 'nope'"):
        gym.make("ReasoningGym-v0", task="nope")
    with pytest.raises(ValueError, match=r"ReasoningGym-v0 needs task="):
        gym.make("ReasoningGym-v0")
    with pytest.raises(
        ValueError,
        match=r"rejected config=\{'colours': 3\}.*config fields are \[.*"
        r"'min_num_vertices'",
    ):
        ReasoningGymTask("graph_color", size=2, config={"colours": 3})
    with pytest.raises(ValueError, match="pass seed as the seed= argument"):
        ReasoningGymTask("chain_sum", config={"seed": 1})
    with pytest.raises(ValueError, match="size must be an integer >= 1, got 0"):
        ReasoningGymTask("chain_sum", size=0)


# --------------------------------------------------------------------------- prompt lists


def test_prompt_list_verifiers():
    calls = []

    def is_even(answer: str) -> bool:
        calls.append(answer)
        return answer.isdigit() and int(answer) % 2 == 0

    pairs = [
        ("What is 2+2?", "4"),
        ("Name an even number.", is_even),
        ("How close to 10 can you get?", lambda a: max(0.0, 1 - abs(float(a) - 10) / 10)),
        ("Write 1000.", 1000),
    ]
    env = PromptListEnv(pairs, name="mine", answer_format="tags")
    cases = {
        0: [(tags("4"), 1.0), (tags(" 4.0 "), 1.0), (tags("5"), 0.0), ("", 0.0), ("4", 0.0)],
        1: [(tags("12"), 1.0), (tags("7"), 0.0), (tags(""), 0.0), ("12", 0.0)],
        2: [(tags("10"), 1.0), (tags("5"), 0.5), ("", 0.0)],
        3: [
            (tags("1,000"), 1.0),
            (tags("1000"), 1.0),
            (tags("one thousand"), 0.0),
            ("<answer>", 0.0),
        ],
    }
    for i, expected in cases.items():
        _, info = env.reset(options={"context": i})
        assert info["task"] == "mine" and info["answer"] == (
            "" if callable(pairs[i][1]) else str(pairs[i][1])
        )
        completions, rewards = zip(*expected)
        np.testing.assert_array_equal(env.score_candidates(list(completions)), np.float64(rewards))
    # completions without an extractable answer never reach the verifier
    assert calls == ["12", "7", ""]
    default = gym.make("PromptList-v0", pairs=pairs)  # identity: the whole completion
    default.reset(options={"context": 0})
    assert default.unwrapped.score_candidates([" 4 ", "4 apples"]).tolist() == [1.0, 0.0]


def test_prompt_list_bad_input():
    with pytest.raises(ValueError, match="non-empty sequence of \\(prompt, verifier\\) pairs"):
        PromptListTask([])
    with pytest.raises(ValueError, match=r"pairs\[1\] must be a \(prompt, verifier\) pair"):
        PromptListTask([("a", "1"), ("b",)])
    with pytest.raises(ValueError, match=r"pairs\[0\]: the verifier must be a callable"):
        PromptListTask([("a", None)])
    with pytest.raises(ValueError, match=r"pairs\[0\]: the prompt must be a str"):
        PromptListTask([(3, "3")])
    with pytest.raises(ValueError, match=r"PromptList-v0 needs pairs="):
        gym.make("PromptList-v0")
    env = PromptListEnv([("a", lambda answer: 2.0), ("b", lambda answer: "yes")])
    env.reset(options={"context": 0})
    with pytest.raises(ValueError, match=r"the verifier of prompt 0 returned 2.0; expected a bool"):
        env.step("x")
    env.reset(options={"context": 1})
    with pytest.raises(ValueError, match=r"returned 'yes'"):
        env.score_candidates(["x"])


# --------------------------------------------------------------------------- tiny arithmetic


def test_tiny_arithmetic_task():
    task = TinyArithmeticTask()
    assert len(task) == 110
    prompts = [task.prompt(i) for i in range(len(task))]
    assert len(set(prompts)) == 110 and max(map(len, prompts)) <= 12
    for i, p in enumerate(prompts):
        assert p.endswith("=") and task.answer(i) == str(eval(p[:-1]))  # noqa: S307
        assert task.answer(i) in "0123456789" and len(task.answer(i)) == 1
    assert [TinyArithmeticTask(seed=0).prompt(i) for i in range(5)] == prompts[:5]
    assert [TinyArithmeticTask(seed=1).prompt(i) for i in range(5)] != prompts[:5]
    assert len(TinyArithmeticTask(size=7, operations="+")) == 7
    with pytest.raises(ValueError, match="size must be at most 55"):
        TinyArithmeticTask(size=56, operations="+")
    with pytest.raises(ValueError, match=r"operations must be a non-empty string of '\+' and '-'"):
        TinyArithmeticTask(operations="*")


def test_tiny_arithmetic_env():
    env = gym.make("TinyArithmetic-v0")
    prompt, info = env.reset(seed=0)
    assert prompt == env.unwrapped.prompt and len(prompt) <= 12 and "=" in prompt
    a = info["answer"]
    other = str((int(a) + 1) % 10)
    completions = [a, f" {a} is it", f"{a}{other}", "", "   ", other, f"x{a}"]
    rewards = env.unwrapped.score_candidates(completions)
    assert rewards.tolist() == [1, 1, 1, 0, 0, 0, 0]
    _, r, _, _, step_info = env.step(f"{a}\n")
    assert r == 1.0 and step_info["extracted_answer"] == a and step_info["correct"]
    # last_number also works
    env = TinyArithmeticEnv(answer_format="last_number")
    _, info = env.reset(seed=0)
    assert env.score_candidates([f"it is {info['answer']}", "it is 10"]).tolist() == [1.0, 0.0]


# --------------------------------------------------------------------------- the env API


def _all_envs(rg_envs):
    return [
        *rg_envs.values(),
        GSM8KEnv(GSM8K_SAMPLE),
        PromptListEnv([("2+2=", "4"), ("3+3=", "6")]),
        TinyArithmeticEnv(),
    ]


def test_check_env_and_spaces(rg_envs):
    for env in _all_envs(rg_envs):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # the "no spec" render-mode notice
            check_env(env)
        assert env.metadata["tpo_group_mode"] == "sequence"
        assert supports_candidate_scoring(env)
        obs_space, act_space = env.observation_space, env.action_space
        assert isinstance(obs_space, gym.spaces.Text) and isinstance(act_space, gym.spaces.Text)
        assert obs_space.min_length == act_space.min_length == 0
        assert set(BASE_CHARSET) <= obs_space.character_set == act_space.character_set
        assert all(obs_space.contains(p) for p in env.prompts)
        assert obs_space.max_length == max(map(len, env.prompts))
    assert "£" in rg_envs["gsm_symbolic"].charset or "€" in rg_envs["gsm_symbolic"].charset
    for env_id in (
        *(f"ReasoningGym-{t}-v0" for t in RG_TASKS),
        "ReasoningGym-v0",
        "GSM8K-v0",
        "PromptList-v0",
        "TinyArithmetic-v0",
    ):
        assert env_id in gym.registry


def test_reset_seeding_and_replay():
    env = TinyArithmeticEnv()
    seq = [env.reset(seed=11)[1]["index"]] + [env.reset()[1]["index"] for _ in range(9)]
    assert len(set(seq)) > 3  # it draws different problems
    other = TinyArithmeticEnv()
    assert [other.reset(seed=11)[1]["index"]] + [other.reset()[1]["index"] for _ in range(9)] == seq
    # a replay returns problem i and consumes no draw
    env.reset(seed=11)
    obs, info = env.reset(options={"context": 42})
    assert info["index"] == 42 and env.index == 42 and obs == env.prompts[42] == env.prompt
    assert info["answer"] == env.answer == env.source.answer(42)
    assert info["metadata"] == env.source.metadata(42)
    assert [env.reset()[1]["index"] for _ in range(9)] == seq[1:]
    with pytest.raises(
        ValueError,
        match=r"invalid context 110 \(out of range\); valid contexts are "
        r"integers in \[0, 109\]",
    ):
        env.reset(options={"context": 110})
    with pytest.raises(ValueError, match=r"unknown reset option\(s\) \['prompt'\]"):
        env.reset(options={"prompt": 1})


def test_score_candidates_matches_step_and_keeps_state(gsm8k_env):
    env = gsm8k_env
    _, info = env.reset(seed=4)
    i, ref = info["index"], info["answer"]
    completions = [tags(ref), f"#### {ref}", "42 and 43", "", tags("x"), f"so {ref}."]
    rewards = score_candidates(env, completions)
    assert rewards.dtype == np.float64 and rewards.shape == (6,)
    assert env.index == i  # no state change
    assert score_candidates(env, completions).tolist() == rewards.tolist()
    for k, completion in enumerate(completions):
        env.reset(options={"context": i})
        _, r, *_ = env.step(completion)
        assert r == rewards[k]
    assert rewards.tolist() == [1, 1, 0, 0, 0, 1]


def test_chat_prompt_and_instruction():
    env = PromptListEnv(
        [("2+2=", "4")], system_prompt="Answer in <answer> tags.", instruction=" Go."
    )
    obs, _ = env.reset(seed=0)
    assert obs == "2+2= Go."
    assert env.chat_prompt == [
        {"role": "system", "content": "Answer in <answer> tags."},
        {"role": "user", "content": "2+2= Go."},
    ]
    plain = TinyArithmeticEnv()
    plain.reset(seed=0)
    assert plain.system_prompt is None
    assert plain.chat_prompt == [{"role": "user", "content": plain.prompt}]
    rg = ReasoningGymEnv("chain_sum", size=2, instruction="")
    assert rg.prompts[0] == rg.source.prompt(0)


def test_bad_completions_and_lifecycle():
    env = PromptListEnv([("2+2=", "4")], max_completion_length=8)
    with pytest.raises(PromptEnvResetNeeded, match=r"call reset\(\) before step\(\)"):
        env.step("4")
    with pytest.raises(PromptEnvResetNeeded, match=r"call reset\(\) before score_candidates"):
        env.score_candidates(["4"])
    with pytest.raises(PromptEnvResetNeeded):
        _ = env.prompt
    env.reset(seed=0)
    with pytest.raises(ValueError, match="completion must be a str, got int 4"):
        env.step(4)
    with pytest.raises(
        ValueError, match="completion has 9 characters, more than the action space's max_length 8"
    ):
        env.step("4" * 9)
    with pytest.raises(ValueError, match="completions must be a sequence of K str, got str"):
        env.score_candidates("4")
    with pytest.raises(ValueError, match=r"at least one completion \(K >= 1\)"):
        env.score_candidates([])
    with pytest.raises(
        ValueError,
        match=r"completions\[1\] has 10 characters, more than the "
        "action space's max_length 8",
    ):
        env.score_candidates(["4", "x" * 10])
    with pytest.raises(ValueError, match=r"completions\[0\] must be a str, got bytes"):
        env.score_candidates([b"4"])
    assert env.step("4 ✓ ünï")[1] == 0.0  # characters outside the charset are scored as written
    with pytest.raises(PromptEnvResetNeeded, match="episode ended"):
        env.step("4")
    with pytest.raises(PromptEnvResetNeeded, match="episode ended"):
        env.score_candidates(["4"])
    env.reset()
    assert env.step("4")[1] == 1.0


def test_bad_env_arguments():
    source = TinyArithmeticTask(size=3)
    with pytest.raises(
        ValueError, match=r"max_prompt_length=2 is shorter than prompt \d \(4 characters\)"
    ):
        PromptEnv(source, max_prompt_length=2)
    assert PromptEnv(source, max_prompt_length=50).observation_space.max_length == 50
    with pytest.raises(ValueError, match="max_completion_length must be an integer >= 1, got 0"):
        PromptEnv(source, max_completion_length=0)
    with pytest.raises(ValueError, match=r"unknown answer_format 'xml'"):
        PromptEnv(source, answer_format="xml")
    with pytest.raises(ValueError, match="source must be a tpo_gym.prompts.TaskSource, got list"):
        PromptEnv([("a", "b")])
    with pytest.raises(ValueError, match=r"render_mode must be None or one of \[\]"):
        PromptEnv(source, render_mode="human")


def test_never_imports_torch():
    code = (
        "import sys, gymnasium as gym, tpo_gym, tpo_gym.prompts\n"
        "env = gym.make('TinyArithmetic-v0'); env.reset(seed=0)\n"
        "assert 'reasoning_gym' not in sys.modules\n"
        "env = gym.make('ReasoningGym-chain_sum-v0', size=2); env.reset(seed=0)\n"
        "assert 'reasoning_gym' in sys.modules\n"
        "assert 'torch' not in sys.modules, 'torch was imported'\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)
