"""Known-answer texts: their fingerprints are pinned in test_fingerprint.py."""

from __future__ import annotations

KAT_TEXTS = {
    "ascii": "The quick brown fox jumps over the lazy dog.",
    "ascii_case_punct": "THE QUICK, brown fox -- jumps over the LAZY dog!!!",
    "accents": "Crème brûlée, façade, naïve café: déjà vu à Zürich.",
    "nfkc": "ｆｕｌｌｗｉｄｔｈ text ﬁle Ⅻ x²",
    "cjk": "東京は日本の首都です。中文文本测试。",
    "emoji_mixed": "launch day 🚀🚀 we shipped it 🎉 finally",
    "emoji_only": "😀😃😄",
    "short": "hello world",
    "one_word": "Hello",
    "empty": "",
    "whitespace": " \t\n  \r\n ",
    "punctuation": "!!! ??? ...",
    "very_long": " ".join(f"w{(i * 7919) % 1009}" for i in range(200_000)),
    "cyrillic_greek": "Привет мир, Καλημέρα κόσμε",
}
