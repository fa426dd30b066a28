"""A sentence-transformers folder's prompts (config_sentence_transformers.json's ``prompts`` and
``default_prompt_name``): which one a run puts before each window's content, and its token ids.

Called by the config check (pipeline.engine.resolved), the segment and encode stages' builders, the window
store's key and the metadata. sentence-transformers' ``encode(texts, prompt_name=...)`` prepends the
prompt's text to each text and tokenizes the whole; its Pooling with ``include_prompt: false`` leaves
the first ``prompt_length`` positions ([CLS] and the prompt's tokens) out. No torch here.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from ..errors import ConfigError
from ..types import ModelFacts, Prompt
from .st_folder import settings_in_force

if TYPE_CHECKING:
    from ..options.config import ModelConfig

NO_PROMPT = "none"   # prompt_name "none": no prompt, whatever the folder's default_prompt_name


def chosen_prompt(model: ModelConfig, facts: ModelFacts) -> tuple[str, str] | None:
    """(name, text) of the prompt the run applies; None: no prompt.

    ``model.prompt_name`` None takes the folder's default_prompt_name while its declared settings are
    in force (--folder-settings; the bundled model under auto declares none), "none" takes no prompt, any
    other value must be one of the folder's prompts. A prompt whose text is "" is no prompt, as in
    sentence-transformers. Example: prompts {"query": "query: "}, default "query" -> ("query", "query: ").

    Raises:
        ConfigError (exit 2): a prompt_name that is not one of the folder's prompts (they are listed), or a
            prompt_name other than none for a model that declares no prompts.
    """
    name, s = model.prompt_name, facts.settings
    prompts = dict(s.prompts) if s is not None else {}
    if name == NO_PROMPT:
        return None
    if name is None:
        if s is None or s.default_prompt_name is None or not settings_in_force(model, facts):
            return None
        name = s.default_prompt_name
    elif not prompts:
        raise ConfigError(f"--prompt-name {name!r}: the model {model.model!r} declares no prompts (a "
                          "sentence-transformers folder lists them in config_sentence_transformers.json); drop "
                          "--prompt-name, or put the text at the start of each document")
    elif name not in prompts:
        raise ConfigError(f"--prompt-name {name!r} is not one of the model folder's prompts "
                          f"({', '.join(map(repr, prompts))}); choose one of them, or none for no prompt")
    return (name, prompts[name]) if prompts[name] else None


def run_prompt(model: ModelConfig, facts: ModelFacts, tokenizer, lowercase: bool = False) -> Prompt | None:
    """The run's Prompt (chosen_prompt) with its token ids; None: no prompt.

    Args:
        model, facts: the run's model options and model facts. tokenizer: the model's fast tokenizer.
        lowercase: the run lowercases its texts (pipeline.model.st_folder.lowercases): the prompt too,
            as sentence-transformers lowercases the prompt and the text together.

    Returns:
        Prompt with ``ids``: the prompt's own tokens, no special tokens, as the tokenize stage
        tokenizes a text (pipeline.text.tokenize.tokenize_block). They equal the first tokens of
        sentence-transformers' "prompt + text" where the tokenizer splits words at the prompt's end
        (a WordPiece prompt ending in a space or a punctuation mark: "query: ", "Represent ...: ").

    Raises:
        ConfigError: as chosen_prompt; or a prompt that makes no token.
    """
    from ..text.tokenize import tokenize_block

    chosen = chosen_prompt(model, facts)
    if chosen is None:
        return None
    name, text = chosen
    doc = tokenize_block([text], tokenizer, with_offsets=False, lowercase=lowercase)[0]
    if doc.n_tokens == 0:
        raise ConfigError(f"the prompt {name!r} ({text!r}) of the model folder makes no token; pass --prompt-name "
                          "none, or another of its prompts")
    include = facts.settings.include_prompt if facts.settings is not None else True
    return Prompt(name=name, text=text, ids=tuple(int(i) for i in doc.ids), pooled=include)


def prompt_metadata(model: ModelConfig, facts: ModelFacts) -> dict | None:
    """The metadata's record of the applied prompt: {"name", "text", "include_prompt"}; None: none.
    Example: {"name": "query", "text": "query: ", "include_prompt": True}."""
    chosen = chosen_prompt(model, facts)
    if chosen is None:
        return None
    include = facts.settings.include_prompt if facts.settings is not None else True
    return {"name": chosen[0], "text": chosen[1], "include_prompt": include}


def pools_prompt(facts: ModelFacts) -> bool:
    """Whether pooling reads a window's prompt positions (Window.prompt_tokens): the folder's Pooling
    ``include_prompt``; True for a model without declared settings."""
    return facts.settings is None or facts.settings.include_prompt
