"""Other libraries' APIs over a `Tokenizer`.

tiktoken_api.py  tiktoken's `Encoding` (`tok.as_tiktoken()`)
hf_batch.py      the HF-style batch call (`tok(texts, padding=..., truncation=...)`)
"""
