"""Writes a tiny random-weight llama model as GGUF, with llama.cpp's own gguf-py.

The text it generates is noise; what matters is that llama-server loads it and
runs its real scheduler, slots, prompt cache and metrics on it. The vocabulary
is SentencePiece-style (llama.cpp's "llama" tokenizer): the special tokens, all
256 byte-fallback tokens, and a few hundred pieces, so any UTF-8 prompt
tokenizes. Usage: make-model.py OUT.gguf [--width 64] [--layers 2] [--ctx 8192]
"""
import argparse
import string

import numpy as np
import gguf

# A ChatML-style template: llama-server renders chat messages with it (--jinja).
CHAT_TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


def vocabulary(words):
    """(tokens, scores, types): unk, bos, eos, the byte tokens, then pieces."""
    tokens = ["<unk>", "<s>", "</s>"]
    types = [gguf.TokenType.UNKNOWN, gguf.TokenType.CONTROL, gguf.TokenType.CONTROL]
    tokens += [f"<0x{b:02X}>" for b in range(256)]
    types += [gguf.TokenType.BYTE] * 256
    pieces = ["\u2581"] + list(string.ascii_letters + string.digits + string.punctuation)
    pieces += ["\u2581" + c for c in string.ascii_lowercase]
    pieces += ["\u2581" + w for w in ("the", "of", "and", "to", "in", "is", "you", "that", "it", "for", "are", "with", "on", "as", "be", "this", "was", "have", "or", "at")]
    # Whole words a caller's text is made of, one token each as common words
    # are in a trained vocab, so its token counts come out near a real one's.
    # SentencePiece merges pairs into pieces the vocab holds, so every prefix
    # of a word is a piece too: the path its merges take.
    for word in words:
        for end in range(2, len(word) + 1):
            piece = "\u2581" + word[:end]
            if piece not in pieces:
                pieces.append(piece)
    tokens += pieces
    types += [gguf.TokenType.NORMAL] * len(pieces)
    # Longer pieces score higher, so the tokenizer prefers them.
    scores = [0.0] * (3 + 256) + [-1000.0 + len(p) for p in pieces]
    return tokens, scores, types


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--width", type=int, default=64)
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--ctx", type=int, default=8192)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--words", default="", help="comma-separated words to add as whole-word pieces")
    a = ap.parse_args()
    rng = np.random.default_rng(a.seed)
    tokens, scores, types = vocabulary([w for w in a.words.split(",") if w])
    n_vocab, d, ff = len(tokens), a.width, 4 * a.width

    w = gguf.GGUFWriter(a.out, "llama")
    w.add_name("tiny-random-llama")
    w.add_context_length(a.ctx)
    w.add_embedding_length(d)
    w.add_block_count(a.layers)
    w.add_feed_forward_length(ff)
    w.add_head_count(a.heads)
    w.add_head_count_kv(a.heads)
    w.add_rope_dimension_count(d // a.heads)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_file_type(gguf.LlamaFileType.ALL_F32)
    w.add_tokenizer_model("llama")
    w.add_token_list(tokens)
    w.add_token_scores(scores)
    w.add_token_types(types)
    w.add_unk_token_id(0)
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)
    w.add_add_bos_token(True)
    w.add_chat_template(CHAT_TEMPLATE)

    def tensor(name, *shape):
        # numpy's shape is ggml's dimensions reversed: (rows, cols) = ne[1], ne[0].
        w.add_tensor(name, (rng.standard_normal(shape) * 0.02).astype(np.float32))

    tensor("token_embd.weight", n_vocab, d)
    w.add_tensor("output_norm.weight", np.ones(d, dtype=np.float32))
    tensor("output.weight", n_vocab, d)
    for i in range(a.layers):
        p = f"blk.{i}."
        w.add_tensor(p + "attn_norm.weight", np.ones(d, dtype=np.float32))
        for t in ("attn_q", "attn_k", "attn_v", "attn_output"):
            tensor(p + t + ".weight", d, d)
        w.add_tensor(p + "ffn_norm.weight", np.ones(d, dtype=np.float32))
        tensor(p + "ffn_gate.weight", ff, d)
        tensor(p + "ffn_up.weight", ff, d)
        tensor(p + "ffn_down.weight", d, ff)

    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


if __name__ == "__main__":
    main()
