"""`info`: what a vocabulary holds and whether this build can run it."""

from __future__ import annotations

import json

from .common import CLIError, add_vocab_options, check_mode, load_tokenizer


def exact_mode_status(tok) -> tuple[bool, str]:
    """(usable, explanation) for mode="exact" with this vocabulary in this build."""
    try:
        check_mode(tok, "exact")
    except CLIError as e:
        return False, str(e).removeprefix("--mode exact: ")
    stages = tok.vocab.pretokenizer.stages if tok.vocab.pretokenizer else ()
    name = tok.vocab.pattern_name or "compiled from its regex"
    return True, f"yes (pre-tokenizer: {name}" + (f", {len(stages)} stages)" if len(stages) > 1 else ")")


def cmd_info(args) -> int:
    import jax

    from .. import disk_cache
    from ..ops import primitive
    from ..ops.primitive import TABLE_OPERANDS

    tok = load_tokenizer(args.vocab, args.tiktoken, args.pattern)
    v = tok.vocab
    tables = dict(zip(TABLE_OPERANDS, tok.host_tables("all" if v.special_tokens else "none")))
    exact_ok, exact_text = exact_mode_status(tok)
    specials = sorted(v.special_tokens.items(), key=lambda kv: kv[1])
    info = dict(
        name=v.name,
        source=v.source,
        n_vocab=v.n_vocab,
        mergeable_tokens=len(v.mergeable_ids),
        merges=len(v.merges),
        special_tokens=dict(specials),
        pattern_name=v.pattern_name,
        pattern=v.pattern,
        whole_piece_shortcut=v.whole_piece_shortcut,
        unsupported=v.unsupported,
        exact_mode=exact_ok,
        exact_mode_detail=exact_text,
        max_piece_len=tok.max_piece_len,
        table_bytes=sum(a.nbytes for a in tables.values()),
        tables={
            k: dict(shape=list(a.shape), dtype=str(a.dtype), bytes=int(a.nbytes)) for k, a in tables.items()
        },
        cuda_module=primitive.HAS_CUDA_MODULE,
        devices=[str(d) for d in jax.devices()],
        cache=disk_cache.usage(),
    )
    if args.json:
        print(json.dumps(info, indent=2))
        return 0
    shown = specials if args.all_specials else specials[:10]
    special_text = ", ".join(f"{s}={i}" for s, i in shown)
    if len(shown) < len(specials):
        special_text += f", ... ({len(specials) - len(shown)} more; --all-specials)"
    rows = [
        ("vocabulary", v.name),
        ("source", v.source),
        ("n_vocab", f"{v.n_vocab} ({len(v.mergeable_ids)} mergeable, {len(v.merges)} merge pairs)"),
        ("special tokens", f"{len(specials)}" + (f": {special_text}" if specials else "")),
        (
            "pattern",
            f"{v.pattern_name or 'unrecognised'}: {v.pattern}"
            if v.pattern or not v.pretokenizer
            else " | ".join(f"{st.behaviour} {st.pattern!r}" for st in v.pretokenizer.stages),
        ),
        ("whole-piece shortcut", "yes" if v.whole_piece_shortcut else "no"),
        ("exact mode", exact_text if exact_ok else f"no: {exact_text}"),
        ("bytes mode", "yes"),
        ("max piece length", f"{tok.max_piece_len} bytes"),
        (
            "table bytes",
            f"{info['table_bytes']:,} (" + ", ".join(f"{k} {a.nbytes:,}" for k, a in tables.items()) + ")",
        ),
        (
            "backends",
            f"cpu{', cuda' if primitive.HAS_CUDA_MODULE else ''} built; JAX devices: "
            + ", ".join(info["devices"]),
        ),
        ("disk cache", _cache_text(info["cache"])),
    ]
    width = max(len(k) for k, _ in rows)
    for k, val in rows:
        print(f"{k:<{width}}  {val}")
    return 0


def _cache_text(cache: dict | None) -> str:
    if cache is None:
        return "off (BLOCKBPE_CACHE_DIR is empty)"
    kinds = ", ".join(f"{kind} {n / 1e6:.1f}" for kind, n in cache["bytes"].items())
    held = sum(cache["bytes"].values())
    return f"{cache['folder']}: {held / 1e6:.1f} MB of {cache['limit_bytes'] / 1e6:.0f} ({kinds})"


def add_parsers(sub) -> None:
    i = sub.add_parser(
        "info",
        help="describe a vocabulary",
        description="Vocabulary size, special tokens, pre-tokenizer pattern, exact "
        "mode support, device table sizes.",
    )
    add_vocab_options(i, " (this or --tiktoken is required)")
    i.add_argument("--all-specials", action="store_true", help="list every special token")
    i.add_argument("--json", action="store_true", help="print a JSON object")
    i.set_defaults(func=cmd_info)
