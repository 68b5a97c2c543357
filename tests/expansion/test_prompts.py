"""GAR prompts: package data, dataset resolution, filling as the official script, LameR passages, chat, sampling."""

from __future__ import annotations

import json
from importlib import resources

import pytest

from conftest import shared_path
from r2med.datasets.catalog import dataset_names, get_spec
from r2med.errors import UsageError
from r2med.expansion.prompts import (
    DEFAULT_SAMPLING,
    METHODS,
    SKY_T1_SYSTEM_PROMPT,
    build_prompt,
    chat_messages,
    format_passages,
    prompt_datasets,
    prompt_sha256,
    prompt_template,
    sampling_params,
    system_prompt_for,
)

Q = "Why do moths {circle} lamps? See {PASSAGE} and {0}."  # braces must survive untouched


def _package_prompts() -> dict:
    return json.loads(resources.files("r2med").joinpath("data/prompts.json").read_text(encoding="utf-8"))


def test_every_prompt_key_is_a_catalog_dataset():
    prompts = _package_prompts()["prompts"]
    assert tuple(prompts) == METHODS
    for method, templates in prompts.items():
        for key in templates:
            assert get_spec(key).name == key, f"{method}/{key} is not a public dataset name"
        assert sorted(templates) == sorted(dataset_names())
        assert prompt_datasets(method) == list(templates)


def test_package_prompts_equal_protocol_copy():
    reference = json.loads(shared_path("protocol", "prompts.json").read_text(encoding="utf-8"))
    assert _package_prompts() == reference


def test_template_accepts_aliases_and_case():
    assert prompt_template("hyde", "Stack-Biology") == prompt_template("HYDE", "biology")
    assert prompt_template("lamer", "PMCPatients") == prompt_template("lamer", "PMC-Clinical")


def test_unknown_method_and_dataset():
    with pytest.raises(UsageError, match="unknown GAR method 'hide'; did you mean 'hyde'"):
        prompt_template("hide", "Biology")
    with pytest.raises(UsageError, match="unknown dataset 'Biolgy'; did you mean 'Biology'"):
        prompt_template("hyde", "Biolgy")


def test_prompt_sha256():
    # sha256 of the UTF-8 text 'Please write a passage to help answer the Biology post.\nPost: {TEXT}\nPassage: '
    assert prompt_sha256("hyde", "Biology") == "505a26762018840aa8cf4927450ecc0eff761377b15ba187d20ccf8c42ca2cf9"
    assert prompt_sha256("hyde", "Stack-Biology") == prompt_sha256("hyde", "Biology")
    # MedXpertQA-Exam and MedQA-Diag share their hyde template; Bioinformatics does not
    assert prompt_sha256("hyde", "MedXpertQA-Exam") == prompt_sha256("hyde", "MedQA-Diag")
    assert prompt_sha256("hyde", "Bioinformatics") != prompt_sha256("hyde", "Biology")


def test_hyde_prompts():
    assert build_prompt("hyde", "Biology", Q) == (
        "Please write a passage to help answer the Biology post.\nPost: " + Q + "\nPassage: ")
    assert build_prompt("hyde", "PMC-Clinical", "A 60-year-old man.") == (
        "Please write a similar case to help diagnose the Clinical Case.\nCase: A 60-year-old man.\nSimilar Case: ")


def test_query2doc_prompts():
    bio = build_prompt("query2doc", "Biology", Q)
    assert bio.startswith("Write a passage that help answer the Biology post.\n\n###Examples:###\n"
                          "Post: What does a virus need to transmit through air")
    assert bio.endswith("Phumichai et al., 2015).\n\n\n###Real Test:###\nPost: " + Q + "\nPassage: ")
    iiyi = build_prompt("query2doc", "IIYi-Clinical", "Male, 50.")
    assert iiyi.startswith("Write a similar case to help diagnose the Clinical Case.\n\n###Examples:###\n"
                           "Case: [Chief Complaint]: Male, 50 years old\n")
    assert iiyi.endswith("patients with recurrent seizures.\n\n\n###Real Test:###\nCase: Male, 50.\nSimilar Case: ")
    # the template has exactly one placeholder: the filled prompt is template minus "{TEXT}" plus the query
    assert len(iiyi) == len(prompt_template("query2doc", "IIYi-Clinical")) - len("{TEXT}") + len("Male, 50.")


def test_lamer_prompts():
    passages = ["Moths navigate\nby the moon.", "Light  pollution."]
    bio = build_prompt("lamer", "Biology", Q, passages)
    assert bio == (
        "Give a Biology post and its possible relevant passages (most of these passages are wrong). Please write a "
        "correct passage that help answer the post.\nJust output the correct passage, don't explanation.\n\n"
        "Post: " + Q + "\n\nPossible Relevant Passages: \n[1]. Moths navigate by the moon.\n[2]. Light pollution.")
    pmc = build_prompt("lamer", "PMC-Clinical", "Case X.", passages[:1])
    assert pmc.startswith("Give a Clinical Case and its possible similar cases (most of these cases are non-similar).")
    assert pmc.endswith("Case: Case X.\n\nPossible Similar Cases: \n[1]. Moths navigate by the moon.")


def test_passages_rules():
    with pytest.raises(UsageError, match="lamer needs the first-stage passages"):
        build_prompt("lamer", "Biology", "q")
    with pytest.raises(UsageError, match="list of passage texts"):
        build_prompt("lamer", "Biology", "q", "one string")
    with pytest.raises(UsageError, match="hyde does not use first-stage passages"):
        build_prompt("hyde", "Biology", "q", ["p"])


def test_format_passages_worked_example():
    long_doc = " ".join(f"w{i}" for i in range(600))  # 600 words: only w0..w511 are kept
    passages = ["Line one\nline two", "tabs\tand  double  spaces", long_doc] + [f"doc {i}" for i in range(4, 12)]
    out = format_passages(passages)
    entries = out.split("\n[")
    assert entries[0] == ""  # every entry starts with a newline, nothing before the first
    assert len(entries) == 11  # "" + 10 passages: the 11th passage (doc 11) is dropped
    assert entries[1] == "1]. Line one line two"
    assert entries[2] == "2]. tabs and double spaces"
    assert entries[3] == "3]. " + " ".join(f"w{i}" for i in range(512))
    assert entries[3].endswith(" w511")
    assert entries[10] == "10]. doc 10"
    assert "doc 11" not in out
    assert format_passages(passages, max_passages=None).endswith("\n[11]. doc 11")
    assert format_passages(["a b c d"], max_words=3) == "\n[1]. a b c"
    assert format_passages([]) == ""
    with pytest.raises(UsageError):
        format_passages(["a"], max_words=0)


def test_chat_messages_and_system_prompts():
    assert chat_messages("P") == [{"role": "system", "content": "You are a helpful assistant."},
                                  {"role": "user", "content": "P"}]
    assert chat_messages("P", system="S")[0] == {"role": "system", "content": "S"}
    assert chat_messages("P", system=None) == [{"role": "user", "content": "P"}]
    assert system_prompt_for("gpt4") == "You are a helpful assistant."
    assert system_prompt_for("sky-32b") == SKY_T1_SYSTEM_PROMPT
    # the official line continuations join with single spaces; '\n\n' is two real newlines
    assert "separated with '\n\n'} <|end_of_thought|> Each step" in SKY_T1_SYSTEM_PROMPT
    assert SKY_T1_SYSTEM_PROMPT.endswith("<|end_of_solution|> Now, try to solve the following question "
                                         "through the above guidelines:")


def test_default_sampling():
    assert dict(DEFAULT_SAMPLING["api"]) == {"temperature": 0.8, "top_p": 0.8}
    assert dict(DEFAULT_SAMPLING["local"]) == {"temperature": 0.7, "max_tokens": 10240, "seed": 42}
    with pytest.raises(TypeError):
        DEFAULT_SAMPLING["api"]["temperature"] = 0.0  # type: ignore[index]
    params = sampling_params("local")
    params["seed"] = 7
    assert DEFAULT_SAMPLING["local"]["seed"] == 42
    assert json.dumps(sampling_params("api"), sort_keys=True) == '{"temperature": 0.8, "top_p": 0.8}'
    with pytest.raises(UsageError, match="valid: api, local"):
        sampling_params("gpu")


def test_a_dataset_outside_r2med_is_pointed_to_prompt_dataset():
    with pytest.raises(UsageError) as info:
        prompt_template("query2doc", "scifact")
    assert str(info.value) == (
        "unknown dataset 'scifact' (R2MED's query2doc prompts are written per R2MED dataset): for a collection outside "
        "R2MED, choose the dataset whose prompt suits it with --prompt-dataset NAME (prompt_dataset=NAME in Python), "
        "one of Biology, Bioinformatics, Medical-Sciences, MedXpertQA-Exam, MedQA-Diag, PMC-Treatment, PMC-Clinical, "
        "IIYi-Clinical"
    )
