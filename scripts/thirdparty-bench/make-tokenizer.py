"""Builds a small Hugging Face tokenizer offline, for load generators that
count tokens with one (guidellm, aiperf) on a machine that cannot reach the
Hugging Face hub.

It is a byte-level BPE trained on a generated English-like corpus: byte-level,
so any text the tool generates encodes without unknown tokens and decodes back
to itself. It is NOT the tokenizer of the model the servers run, so the token
counts a tool reports with it are approximate.

Usage: python make-tokenizer.py OUT_DIR   (writes tokenizer.json and
tokenizer_config.json; AutoTokenizer.from_pretrained(OUT_DIR) loads it)
"""

import json
import random
import sys
from pathlib import Path

from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

# A fixed word list and seed: the same tokenizer on every run.
WORDS = (
    "the of and to in is was he for it with as his on be at by had are but from "
    "not have all were when we there can an your which their said if will each "
    "about how up out them then she many some so these would other into has more "
    "her two like him see time could no make than first been its who now people "
    "my made over did down only way find use may water long little very after "
    "words called just where most know get through back much before go good new "
    "write our used me man too any day same right look think also around another "
    "came come work three word must because does part even place well such here "
    "take why things help put years different away again off went old number "
    "great tell men say small every found still between name should home big give "
    "air line set own under read last never us left end along while might next "
    "sound below saw something thought both few those always looked show large "
    "often together asked house world going want school important until form food "
    "keep children feet land side without boy once animals life enough took sometimes "
    "four head above kind began almost live page got earth need far hand high year "
    "mother light parts country father let night following picture being study second "
    "eyes soon times story boys since white days ever paper hard near sentence better "
    "best across during today others however sure means knew its try told young miles "
    "sun ways thing whole hear example heard several change answer room sea against "
    "top turned learn point city play toward five using himself usually model server "
    "request token cache queue gateway prompt output latency"
).split()


def corpus(lines: int, seed: int = 1):
    rng = random.Random(seed)
    for _ in range(lines):
        n = rng.randint(6, 24)
        sentence = " ".join(rng.choice(WORDS) for _ in range(n))
        yield sentence.capitalize() + rng.choice([".", ".", ",", "?", "!"]) + f" {rng.randint(0, 9999)}"


def main() -> None:
    out = Path(sys.argv[1] if len(sys.argv) > 1 else "tokenizer")
    out.mkdir(parents=True, exist_ok=True)

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=4096,
        special_tokens=["<s>", "</s>", "<unk>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(corpus(20000), trainer=trainer)
    tok.save(str(out / "tokenizer.json"))

    # The least AutoTokenizer needs to load tokenizer.json without a model config.
    config = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "bos_token": "<s>",
        "eos_token": "</s>",
        "unk_token": "<unk>",
        "model_max_length": 32768,
    }
    (out / "tokenizer_config.json").write_text(json.dumps(config, indent=2) + "\n")
    print(f"tokenizer: {tok.get_vocab_size()} tokens in {out}")


if __name__ == "__main__":
    main()
