"""The corpus job over a Ray cluster (optional extra `blockbpe_jax[ray]`): parquet files in,
Megatron, flat or ArrayRecord shards out, with corpus/ray_stage.py's stage and sink; resumable
from its plan.

    python3 -m blockbpe_jax.corpus.ray_job INPUT... -o DIR/NAME --vocab PATH [--field text]
        [--format megatron|flat|arrayrecord] [--address auto] [--concurrency N] [--num-gpus 1] [--append-eod]

writes `DIR/NAME.plan.json` first (the units), the shards `DIR/NAME_<unit>.bin/.idx` (or
`DIR/NAME_<unit>.array_record`), and the sidecar `DIR/NAME.json` last. Run again after a failure, it encodes only the units without a
shard. On one machine without Ray: `blockbpe-jax encode`.
"""

from __future__ import annotations

import json
import os
import shutil
import uuid
from pathlib import Path
from typing import Sequence

from .eod import eod_id
from .shards.megatron import DTYPE_CODES, MEGATRON_FORMAT, megatron_dtype
from .ray_stage import (
    FORMATS,
    UNIT_BYTES,
    EncodeBatch,
    ShardSink,
    consolidate,
    plan_units,
    read_units,
    shard_names,
)
from .shards.array_records import ARRAY_RECORD_FORMAT, native_module
from .shards.flat import FLAT_FORMAT, sidecar_path, token_dtype
from .types import CorpusError


def _write_json(path: Path, value: dict) -> None:
    tmp = path.with_name(f"{path.name}.tmp-{uuid.uuid4().hex}")
    tmp.write_text(json.dumps(value, indent=2, default=str) + "\n")
    os.replace(tmp, path)


def _clear(prefix: Path) -> None:
    """An earlier output of this prefix removed (overwrite)."""
    for p in [sidecar_path(prefix), Path(f"{prefix}.plan.json")]:
        p.unlink(missing_ok=True)
    for p in [
        *prefix.parent.glob(f"{prefix.name}_[0-9]*.bin"),
        *prefix.parent.glob(f"{prefix.name}_[0-9]*.idx"),
        *prefix.parent.glob(f"{prefix.name}_[0-9]*.array_record"),
    ]:
        p.unlink()
    shutil.rmtree(f"{prefix}.parts", ignore_errors=True)


def encode_parquet(
    paths: Sequence[str | os.PathLike],
    out_prefix: str | os.PathLike,
    vocab: str | os.PathLike,
    *,
    column: str = "text",
    fmt: str = "megatron",
    unit_bytes: int = UNIT_BYTES,
    concurrency: int = 1,
    num_gpus: float = 0,
    overwrite: bool = False,
    stage=EncodeBatch,
    map_options: dict | None = None,
    **engine,
) -> dict:
    """Tokenizes the parquet files' `column` into shards at out_prefix on the Ray cluster that
    `ray.init` joined: one shard per unit (`corpus.ray_stage.plan_units`), document j of a shard its
    unit's row j, ids equal to `encode_batch`'s. An output left by a failed run of the same job
    is resumed: only the units without a shard are encoded, and the output is byte for byte that
    of a run never stopped.

    Args:
        paths: parquet files or folders of them.
        out_prefix: DIR/NAME of the output.
        vocab: the vocabulary (a file or folder; each actor loads it).
        column: the text column.
        fmt: "megatron" (Megatron-LM's .bin/.idx), "flat" or "arrayrecord".
        unit_bytes: a unit's column bytes, at most.
        concurrency: the encoding actors.
        num_gpus: GPUs per actor (1 on GPU nodes).
        overwrite: replace a complete output, or one started with other inputs or options.
        stage: the map_batches class (EncodeBatch or a subclass).
        map_options: more map_batches arguments for the stage (max_restarts, max_task_retries, ...).
        engine: encode_arrow's options (mode, allowed_special, batch_bytes, append_eod, ...;
            append_eod True is resolved to the vocabulary's end-of-text id here, before any task).

    Returns:
        the sidecar.
    """
    import ray.data

    from ..tokenizer import Tokenizer

    if fmt not in FORMATS:
        raise CorpusError(f"format {fmt!r}: the Ray job writes {', '.join(FORMATS)} shards")
    if fmt == "arrayrecord":
        native_module()  # (its absence named here, before any task)
    prefix = Path(os.path.expanduser(os.fspath(out_prefix)))
    if not prefix.name:
        raise CorpusError(f"{out_prefix}: the output needs a file name prefix (DIR/NAME)")
    prefix.parent.mkdir(parents=True, exist_ok=True)
    tok = Tokenizer.from_file(vocab)
    n_vocab = tok.vocab.n_vocab
    eod = eod_id(tok, engine.pop("append_eod", False))
    if eod is not None:  # (the actors append this id; the plan records it)
        engine["append_eod"] = eod
    units = plan_units(paths, column, unit_bytes)
    plan = dict(
        format=fmt,
        column=column,
        vocab=os.fspath(Path(vocab).resolve()),
        engine={k: engine[k] for k in sorted(engine)},
        inputs=[os.fspath(p) for p in paths],
        units=units,
    )
    plan_path = Path(f"{prefix}.plan.json")
    if overwrite:
        _clear(prefix)
    elif sidecar_path(prefix).exists():
        raise CorpusError(f"{sidecar_path(prefix)}: output exists (use overwrite)")
    elif plan_path.exists() and json.loads(plan_path.read_text()) != json.loads(
        json.dumps(plan, default=str)
    ):
        raise CorpusError(f"{plan_path}: an output begun with other inputs or options (use overwrite)")
    _write_json(plan_path, plan)
    todo = set(consolidate(prefix, units, fmt))
    if todo:
        ds = ray.data.from_items([u for u in units if u["unit"] in todo], override_num_blocks=len(todo))
        ds = ds.map_batches(read_units, fn_kwargs=dict(column=column), batch_size=1, batch_format="pyarrow")
        ds = ds.map_batches(
            stage,
            fn_constructor_kwargs=dict(vocab=os.fspath(vocab), column=column, keep_text=False, **engine),
            batch_size=None,
            batch_format="pyarrow",
            compute=ray.data.ActorPoolStrategy(size=concurrency),
            num_gpus=num_gpus,
            **(map_options or {}),
        )
        ds.write_datasink(ShardSink(prefix, fmt, n_vocab))
    missing = consolidate(prefix, units, fmt)
    if missing:  # (every task reported success: a part was lost; run the job again)
        raise CorpusError(f"{prefix}: units {missing[:5]} have no shard after the run")
    shutil.rmtree(f"{prefix}.parts", ignore_errors=True)
    sidecar = _layout(fmt, n_vocab)
    shards = []
    for u in units:
        data_path, idx_path = shard_names(prefix, u["unit"], fmt)
        if fmt == "arrayrecord":  # (its .idx, the offsets, counts the tokens; removed below)
            with open(idx_path, "rb") as f:
                f.seek(-8, os.SEEK_END)
                shard = dict(
                    file=data_path.name, documents=u["rows"], tokens=int.from_bytes(f.read(8), "little")
                )
        else:
            shard = dict(bin=data_path.name, idx=idx_path.name, documents=u["rows"])
            shard["tokens"] = data_path.stat().st_size // (2 if sidecar["dtype"] == "uint16" else 4)
        if fmt == "megatron":
            shard["prefix"] = data_path.stem
        shards.append(dict(**shard, input=u["path"], row_groups=u["groups"]))
    if fmt == "arrayrecord":  # (the output is the CLI's: shards and sidecar; a job stopped here
        # finds no .idx when run again, and writes the same shards again)
        for u in units:
            shard_names(prefix, u["unit"], fmt)[1].unlink()
    v = tok.vocab
    sidecar.update(
        vocab=v.name,
        n_vocab=n_vocab,
        mode=engine.get("mode", "exact"),
        allowed_special=engine.get("allowed_special", "none"),
        split="lines",
        jsonl_field=column,
        append_eod=eod,
        inputs=plan["inputs"],
        vocab_arg=dict(vocab=plan["vocab"]),
        shards=shards,
        documents=sum(s["documents"] for s in shards),
        tokens=sum(s["tokens"] for s in shards),
    )
    _write_json(sidecar_path(prefix), sidecar)
    return sidecar


def _layout(fmt: str, n_vocab: int) -> dict:
    """The sidecar's format fields, as the CLI's writers give them."""
    if fmt == "arrayrecord":
        dtype = token_dtype(n_vocab).name
        return dict(
            format=ARRAY_RECORD_FORMAT,
            dtype=dtype,
            byteorder="little",
            record="one per document: its ids as raw little-endian " + dtype,
        )
    if fmt == "flat":
        return dict(
            format=FLAT_FORMAT, dtype=token_dtype(n_vocab).name, byteorder="little", idx_dtype="int64"
        )
    dtype = megatron_dtype(n_vocab).name
    return dict(
        format=MEGATRON_FORMAT,
        dtype=dtype,
        dtype_code=DTYPE_CODES[dtype],
        byteorder="little",
        index="Megatron-LM MMIDIDX version 1, one sequence per document",
    )


def main(argv: Sequence[str] | None = None) -> int:
    """`python3 -m blockbpe_jax.corpus.ray_job`: the job on the cluster at --address (default: a local
    one); 2 with one line on a bad input.

    Args:
        argv: the arguments (default: sys.argv[1:]).

    Returns:
        the exit status.
    """
    import argparse
    import sys

    parser = argparse.ArgumentParser(
        prog="python3 -m blockbpe_jax.corpus.ray_job", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("inputs", nargs="+", help="parquet files or folders")
    parser.add_argument("-o", "--output", required=True, help="DIR/NAME of the shards")
    parser.add_argument("--vocab", required=True, help="a vocabulary file or folder")
    parser.add_argument("--field", default="text", help="the text column (default: text)")
    parser.add_argument("--format", choices=FORMATS, default="megatron")
    parser.add_argument("--address", help="the Ray cluster (ray.init(address=...)); default: a local one")
    parser.add_argument("--concurrency", type=int, default=1, help="encoding actors")
    parser.add_argument("--num-gpus", type=float, default=0, help="GPUs per actor")
    parser.add_argument("--unit-bytes", type=int, default=UNIT_BYTES, help="column bytes per unit (shard)")
    parser.add_argument("--overwrite", action="store_true")
    parser.add_argument(
        "--append-eod",
        action="store_true",
        help="the vocabulary's end-of-text id after every document (Megatron's --append-eod)",
    )
    parser.add_argument("--eod-id", type=int, metavar="ID", help="append ID after every document")
    args = parser.parse_args(argv)
    append_eod = args.eod_id if args.eod_id is not None else args.append_eod
    try:
        import ray
    except ImportError:
        print("error: the Ray job needs ray (pip install 'blockbpe_jax[ray]')", file=sys.stderr)
        return 2
    ray.init(address=args.address, ignore_reinit_error=True)  # (a caller's ray.init stands)
    try:
        meta = encode_parquet(
            args.inputs,
            args.output,
            args.vocab,
            column=args.field,
            fmt=args.format,
            unit_bytes=args.unit_bytes,
            concurrency=args.concurrency,
            num_gpus=args.num_gpus,
            overwrite=args.overwrite,
            append_eod=append_eod,
        )
    except (CorpusError, OSError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(
        f"{args.output}: {meta['documents']} documents, {meta['tokens']} tokens in {len(meta['shards'])} shards"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
