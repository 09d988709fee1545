"""Character-level BPE (SentencePiece-style: Llama 2, Mistral v1-v7, Gemma): what the kernel
needs besides the pair table (ffi/core/char_symbols.h), the merge-order check that decides where
merge passes equal the reference's one-merge-at-a-time order (`split_runs`), and the loader
of HF tokenizer.json files whose BPE has `byte_fallback`. The `.model` loader is
blockbpe_jax/vocab/sentencepiece.py.
"""

from __future__ import annotations

import json
from collections import defaultdict

from .hf_fields import parse_added_tokens, parse_hf_merges
from .model import CharLevel, RunRule, Vocab, VocabError, check_id, place_specials, vocab_name

SPACE = "\u2581"  # `▁`: sentencepiece's escaped space
REPLACEMENT = "\ufffd"

# Where the dummy prefix goes (ffi/core/char_symbols.h, kPrefix*).
PREFIX_EVERY_SEGMENT, PREFIX_UNLESS_SPACE, PREFIX_BEFORE_SPECIAL = 1, 2, 4


def piece_bytes(piece: str) -> bytes:
    """The bytes a piece decodes to: `▁` is the space it escapes."""
    return piece.replace(SPACE, " ").encode("utf-8")


MAX_JOINERS = 8  # kMaxJoiners (ffi/core/char_symbols.h): slots of the word rule in char_table


def space_joiners(pieces, char_ids: dict) -> tuple[int, ...] | None:
    """The word rule (ffi/core/char_symbols.h, starts_word): the piece ids of the characters that
    precede a `▁` inside some piece, or None when there are more than MAX_JOINERS (then the
    text merges as one segment). A merge can join a `▁` to the symbol before it only if some
    piece holds that symbol's last character followed by `▁`, so every other `▁` may start a
    word (Mistral: only `▁` itself precedes a `▁`; Gemma: `▁` and `>`, from `>▁</`)."""
    found = {a for p in pieces if p for a, b in zip(p, p[1:]) if b == SPACE}
    if len(found) > MAX_JOINERS:
        return None
    return tuple(sorted(char_ids[ch] for ch in found if ch in char_ids))


# --------------------------------------------------------------------------------------------
# Merge order: when the passes equal the reference, and the run rule where they do not
# --------------------------------------------------------------------------------------------


def char_level_vocab(
    *, name, token_bytes, merges, byte_ids, special_tokens, source, char_level, always_special=()
) -> Vocab:
    """The Vocab of a SentencePiece-style model (every loader's): no pre-tokenizer, no
    whole-piece shortcut; the character tables in `char_level`."""
    return Vocab(
        name=name,
        token_bytes=tuple(token_bytes),
        merges=merges,
        byte_ids=tuple(byte_ids),
        special_tokens=special_tokens,
        pattern=None,
        pattern_name=None,
        whole_piece_shortcut=False,
        pretokenizer=None,
        unsupported=None,
        source=source,
        char_level=char_level,
        always_special=tuple(always_special),
    )


def split_runs(merges: dict, text: list, where: str) -> tuple[dict, RunRule | None]:
    """(merges for the pair table, run rule or None). The table's ranks are 2 * rank + the
    first-only flag (ffi/core/bpe_core.h): at a flagged rank a pass merges only the first pair
    of each run of adjacent candidates, as the reference's one merge at a time does."""
    table, rule, first_only = _split_runs(merges, text, where)
    return {pair: (2 * rank + (rank in first_only), m) for pair, (rank, m) in table.items()}, rule


def first_only_ranks(merges: dict) -> set[int]:
    """The ranks of the merges (a, a) that an earlier merge takes part in the run of: after
    the first of adjacent (a, a) candidates merges, the reference may first merge what that
    made with an `a` on its right (Gemma 4: newline x2 + newline ranks before newline +
    newline) or with another piece of the rank (`aa` + `aa`), which passes would not."""
    first_use: dict[int, int] = {}  # piece -> rank of the first merge with it on its right
    first_made_use: dict[int, int] = {}  # piece -> rank of the first merge with it on either side
    for (left, right), (rank, _) in merges.items():
        first_use[right] = min(first_use.get(right, rank), rank)
        for piece in (left, right):
            first_made_use[piece] = min(first_made_use.get(piece, rank), rank)
    return {
        rank
        for (left, right), (rank, made) in merges.items()
        if left == right and min(first_use[right], first_made_use.get(made, rank)) < rank
    }


def _split_runs(merges: dict, text: list, where: str) -> tuple[dict, RunRule | None, set[int]]:
    """split_runs' work: (merges, run rule or None, first-only ranks). The passes merge every
    occurrence of a segment's lowest rank at once; sentencepiece and HF merge one pair at a
    time, lowest rank first, leftmost first. Runs of one character whose merges tie (`▁▁`+`▁`
    ranks with `▁`+`▁`) must rank after every other merge and be used by no other: they leave
    the pair table for the run rule (ffi/core/char_symbols.h). Runs that passes split
    otherwise get first-only ranks. Elsewhere (a few pieces outrank a piece they contain) the
    differential tests on corpora and generated text are what vouch for the passes."""
    run_of: dict[int, str | None] = {}

    def run_char(i):  # the character of a run piece of 2+ characters, else None
        if i not in run_of:
            t = text[i] or ""
            run_of[i] = t[0] if len(t) > 1 and len(set(t)) == 1 else None
        return run_of[i]

    run_merges = {pair: rm for pair, rm in merges.items() if run_char(rm[1]) is not None}
    if not run_merges:
        return merges, None, set()
    # (only what is_late reads: the run merges' ranks and the pieces they make)
    run_ranks = {rank: (set(), set()) for rank, _ in run_merges.values()}
    run_pieces = {m for _, m in run_merges.values()}
    by_rank: dict[int, tuple[set, set]] = defaultdict(lambda: (set(), set()), run_ranks)
    as_left, as_right = defaultdict(list), defaultdict(list)
    for (left, right), (rank, _) in merges.items():
        if rank in run_ranks:
            run_ranks[rank][0].add(left)
            run_ranks[rank][1].add(right)
        if left in run_pieces:
            as_left[left].append((right, rank))
        if right in run_pieces:
            as_right[right].append((left, rank))

    def is_late(rank, made):
        # made + z (or z + made) ranks no later and z is where another pair of this rank starts
        # (ends): merged one at a time, that pair would lose z; merged in one pass, it keeps it.
        lefts, rights = by_rank[rank]
        return any(r <= rank and z in lefts for z, r in as_left.get(made, ())) or any(
            r <= rank and z in rights for z, r in as_right.get(made, ())
        )

    late = [(pair, rm) for pair, rm in run_merges.items() if is_late(*rm)]
    # Per run character: its run merges, the latest rank of every other merge, and whether a
    # merge that is not one of its runs takes one of its run pieces.
    runs_of: dict[str, dict] = defaultdict(dict)
    for pair, rm in run_merges.items():
        runs_of[run_char(rm[1])][pair] = rm
    latest_rank: dict[str | None, int] = defaultdict(lambda: -1)  # latest rank by run char
    used_by_others: set[str] = set()
    for pair, (rank, piece) in merges.items():
        ch = run_char(piece)
        if rank > latest_rank[ch]:
            latest_rank[ch] = rank
        if pair[0] in run_pieces or pair[1] in run_pieces:
            used_by_others.update(run_char(x) for x in pair if run_char(x) not in (None, ch))
    late_chars = list(dict.fromkeys(run_char(m) for _, (_, m) in late))
    rule_ch = next(
        (
            ch
            for ch in late_chars
            if min(r for r, _ in runs_of[ch].values())
            > max((r for c, r in latest_rank.items() if c != ch), default=-1)
            and ch not in used_by_others
        ),
        None,
    )
    # Equal ranks within a run (sentencepiece's ties, broken by position) differ for sure.
    made_at: dict[tuple, set] = defaultdict(set)  # (run character, rank) -> run pieces made
    for rank, made in run_merges.values():
        made_at[(run_char(made), rank)].add(made)
    for _, (rank, made) in late:
        if run_char(made) != rule_ch and len(made_at[(run_char(made), rank)]) > 1:
            raise VocabError(
                f"{where}: runs of {run_char(made)!r} share one rank ({text[made]!r} and "
                f"others) and are not ranked after every other merge: sentencepiece "
                f"breaks that tie by position, which merge passes cannot"
            )
    # Every other run character (is_late misses some): where passes split a run of it alone
    # otherwise, the first-only ranks must make them agree (Gemma 4's newline, `▁`, tab).
    others = [ch for ch in runs_of if ch != rule_ch]
    split_apart = [ch for ch in others if _first_difference(runs_of[ch], text, set()) is not None]
    first_only = first_only_ranks(merges) if split_apart else set()
    for ch in split_apart:
        _check_runs_by_passes(ch, runs_of[ch], text, where, first_only)
    if rule_ch is None:
        return merges, None, first_only
    runs = runs_of[rule_ch]
    table = {p: rm for p, rm in merges.items() if p not in runs}
    return table, _run_rule(rule_ch, runs, text, where), first_only


def _run_splits(
    runs: dict, text: list, one_at_a_time: bool, limit: int, first_only: frozenset | set = frozenset()
) -> list[list[int]]:
    """The piece lengths a run of m single characters ends as, for m in [0, limit]: merged one
    pair at a time (lowest rank, leftmost first: sentencepiece, HF) or by passes (every
    leftmost-first occurrence of the lowest rank at once: the kernels; at a rank in
    first_only only the first of each run of adjacent occurrences)."""
    rank_of = {(len(text[a]), len(text[b])): r for (a, b), (r, _) in runs.items()}
    out = []
    for m in range(limit + 1):
        chunks = [1] * m
        while True:
            ranks = [rank_of.get(pair, None) for pair in zip(chunks, chunks[1:])]
            lowest = min((r for r in ranks if r is not None), default=None)
            if lowest is None:
                break
            merged, i = [], 0
            while i < len(chunks):
                waits = lowest in first_only and 0 < i < len(ranks) and ranks[i - 1] == lowest
                if i < len(ranks) and ranks[i] == lowest and not waits:
                    merged.append(chunks[i] + chunks[i + 1])
                    i += 2
                    if one_at_a_time:
                        merged += chunks[i:]
                        break
                else:
                    merged.append(chunks[i])
                    i += 1
            chunks = merged
        out.append(chunks)
    return out


def _first_difference(runs: dict, text: list, first_only: set) -> tuple | None:
    """(m, reference split, passes' split) of the shortest run of the character alone that the
    passes (with these first-only ranks) split differently from the reference, or None."""
    limit = 2 * max(len(text[m]) for _, m in runs.values()) + 2
    want = _run_splits(runs, text, True, limit)
    got = _run_splits(runs, text, False, limit, first_only)
    return next(((m, want[m], got[m]) for m in range(limit + 1) if want[m] != got[m]), None)


def _check_runs_by_passes(ch: str, runs: dict, text: list, where: str, first_only: set) -> None:
    """Refuses a run character whose runs merge passes split differently from the reference
    even with the first-only ranks."""
    diff = _first_difference(runs, text, first_only)
    if diff is not None:
        m, want, got = diff
        raise VocabError(
            f"{where}: a run of {m} {ch!r} is merged one pair at a time into pieces of "
            f"{want} characters but by merge passes into {got} (runs of {ch!r} outrank "
            f"their own parts, and merging only the first of adjacent candidates does not "
            f"reproduce it): not supported"
        )


def _run_rule(ch: str, runs: dict, text: list, where: str) -> RunRule:
    """Replays the reference order on runs of ch (lowest rank, leftmost first) and finds the
    split of every run length: a table below T, and a P-character first piece from T on."""
    by_len = {len(text[m]): m for _, m in runs.values()}
    single = next((i for i, t in enumerate(text) if t == ch), None)
    if single is None:
        raise VocabError(f"{where}: runs of {ch!r} merge but {ch!r} is not a token")
    by_len[1] = single
    longest = max(by_len)
    limit = 6 * longest + 16
    splits = _run_splits(runs, text, True, limit)
    step = splits[limit][0]
    long = limit + 1
    while long - 1 >= step and splits[long - 1] == [step] + splits[long - 1 - step]:
        long -= 1
    if long > limit // 2:
        raise VocabError(f"{where}: runs of {ch!r} do not split periodically (checked to {limit})")
    table = tuple(tuple(by_len[k] for k in splits[m]) for m in range(long))
    return RunRule(run_id=single, long=long, long_id=by_len[step], step=step, table=table)


# --------------------------------------------------------------------------------------------
# The same models as HF tokenizer.json (BPE with byte_fallback: Llama 2, Mistral, Gemma on the
# Hub). Ranks come from model.merges; the prefix rule from the normalizer or Metaspace.
# --------------------------------------------------------------------------------------------


def _metaspace_rule(pre: dict, where: str) -> int | None:
    """Prefix rule of a Metaspace pre-tokenizer (None: no prefix)."""
    if pre.get("replacement", SPACE) != SPACE:
        raise VocabError(
            f"{where}: pre_tokenizer.replacement {pre['replacement']!r} is not supported (only '\u2581')"
        )
    if pre.get("split", True):
        raise VocabError(f"{where}: pre_tokenizer: Metaspace with split=true is not supported")
    scheme = pre.get("prepend_scheme", "always" if pre.get("add_prefix_space", True) else "never")
    rules = {
        "first": PREFIX_UNLESS_SPACE,
        "always": PREFIX_EVERY_SEGMENT | PREFIX_UNLESS_SPACE,
        "never": None,
    }
    if scheme not in rules:
        raise VocabError(f"{where}: pre_tokenizer.prepend_scheme {scheme!r} is not supported")
    return rules[scheme]


def _normalizer_rule(norm, where: str) -> int | None:
    """Prefix rule of the Llama-2-style normalizer Sequence[Prepend('▁'), Replace(' ', '▁')]."""
    steps = norm.get("normalizers", []) if norm.get("type") == "Sequence" else [norm]
    kinds = sorted(s.get("type", "?") for s in steps if isinstance(s, dict))
    replace_ok = any(
        s.get("type") == "Replace" and s.get("pattern") == {"String": " "} and s.get("content") == SPACE
        for s in steps
    )
    prepend_ok = any(s.get("type") == "Prepend" and s.get("prepend") == SPACE for s in steps)
    if (
        kinds not in (["Prepend", "Replace"], ["Replace"])
        or not replace_ok
        or ("Prepend" in kinds and not prepend_ok)
    ):
        raise VocabError(
            f"{where}: normalizer: {json.dumps(norm)[:200]} is not supported with "
            f"byte_fallback BPE (only Prepend('\u2581') and Replace(' ', '\u2581'))"
        )
    # HF normalizes each text segment between added tokens: a prefix before every one.
    return PREFIX_EVERY_SEGMENT if "Prepend" in kinds else None


def vocab_from_hf_json(doc: dict, path) -> Vocab:
    where = str(path)
    model = doc["model"]
    vocab_json, merges_json = model.get("vocab"), model.get("merges")
    if not isinstance(vocab_json, dict) or not isinstance(merges_json, list):
        raise VocabError(f"{where}: model.vocab / model.merges: missing or of the wrong type")
    for option in ("continuing_subword_prefix", "end_of_word_suffix", "ignore_merges"):
        if model.get(option):
            raise VocabError(f"{where}: model.{option} is not supported with byte_fallback BPE")
    if model.get("dropout") not in (None, 0, 0.0):
        raise VocabError(f"{where}: model.dropout is not supported")
    norm, pre = doc.get("normalizer"), doc.get("pre_tokenizer")
    if norm and pre:
        raise VocabError(
            f"{where}: a normalizer and a pre_tokenizer together are not supported with byte_fallback BPE"
        )
    if pre:
        if not isinstance(pre, dict) or pre.get("type") != "Metaspace":
            raise VocabError(
                f"{where}: pre_tokenizer {str((pre or {}).get('type'))!r} is not "
                f"supported with byte_fallback BPE (only Metaspace)"
            )
        rule = _metaspace_rule(pre, where)
    elif norm:
        rule = _normalizer_rule(norm, where)
    else:
        raise VocabError(
            f"{where}: byte_fallback BPE without a Replace(' ', '\u2581') normalizer or a "
            f"Metaspace pre-tokenizer is not supported"
        )
    token_text: list[str | None] = [None] * (max(vocab_json.values(), default=-1) + 1)
    for key, token_id in vocab_json.items():
        token_text[check_id(lambda key=key: f"{where}: model.vocab[{key!r}]", token_id)] = key
    byte_ids = [vocab_json.get(f"<0x{b:02X}>", -1) for b in range(256)]
    if -1 in byte_ids:
        raise VocabError(f"{where}: model.vocab: byte_fallback needs the 256 tokens <0x00>..<0xFF>")
    merges = parse_hf_merges(path, merges_json, vocab_json)
    # (from every piece a merge makes, the run rule's too: a run is one word)
    joiners = space_joiners((token_text[m] for m in {m for _, m in merges.values()}), vocab_json)
    merges, runs = split_runs(merges, token_text, where)

    added: dict[str, int] = {}
    entries = doc.get("added_tokens") or []
    for k, (at, text, token_id, flags) in enumerate(parse_added_tokens(doc, path)):
        if entries[k].get("normalized") and not entries[k].get("special"):
            flags.append("normalized")
        if flags:
            raise VocabError(f"{at}: {text!r} uses {'/'.join(flags)}, which is not supported")
        if rule is not None and rule & PREFIX_EVERY_SEGMENT and len(text.encode()) < 2:
            # (a prefix after each: a one-byte token would leave no room for it, char_symbols.h)
            raise VocabError(
                f"{at}: one-byte added token {text!r} is not supported with a prefix per segment"
            )
        added[text] = token_id

    byte_of = {i: bytes([b]) for b, i in enumerate(byte_ids)}
    token_bytes = [
        byte_of[i] if i in byte_of else None if t is None else piece_bytes(t)
        for i, t in enumerate(token_text)
    ]
    token_bytes = place_specials(where, token_bytes, added)
    chars = {t: i for t, i in vocab_json.items() if len(t) == 1}
    space_id = chars.get(SPACE, -1)
    if space_id < 0:
        raise VocabError(f"{where}: model.vocab: no token '\u2581'")
    return char_level_vocab(
        name=vocab_name(path),
        token_bytes=token_bytes,
        merges=merges,
        byte_ids=byte_ids,
        special_tokens=added,
        source=where,
        char_level=CharLevel(
            char_ids={**chars, " ": space_id},
            replacement_id=chars.get(REPLACEMENT, -1),
            prefix_id=space_id if rule is not None else -1,
            prefix_rule=rule or 0,
            word_start_id=space_id if joiners is not None else -1,
            runs=runs,
            joiners=joiners or (),
        ),
    )
