"""Known-answer texts in many scripts: their fingerprints are pinned in text/test_unicode.py."""

from __future__ import annotations

SCRIPT_TEXTS = {
    "latin_diacritics": "Ångström and Dvořák met Łukasz in Škoda's Ærø café; naïve façades, Œuvres.",
    "latin_decomposed": "A\u030angstro\u0308m and Dvor\u030ca\u0301k: cafe\u0301, nai\u0308ve, e\u0323\u0302",
    "greek": "Η ΟΔΟΣ ΤΟΥ ΚΟΣΜΟΥ. Ἀρχὴ ἥμισυ παντός· ΣΟΦΟΣ Σ ΑΣ, ΌΣΟΙ ΈΦΥΓΑΝ",
    "cyrillic": "Съешь же ещё этих мягких французских булок, да выпей чаю. ЁЛКА Їжак",
    "arabic": "اللغة العربية جميلة، ٣ ١٢ ﷺ ﷽ ﻻ وَالسَّلَامُ عَلَيْكُمْ",
    "hebrew": "שָׁלוֹם עוֹלָם, זוהי בדיקה ﬠ ﬡ ﭏ",
    "devanagari": "हिन्दी भाषा में परीक्षण क़लम ज़िन्दगी १२३ क्षत्रिय",
    "thai": "ภาษาไทยไม่มีการเว้นวรรคระหว่างคำ ๑๒๓ ทดสอบ",
    "cjk": "東京都の天気は晴れです。中华人民共和国。㍿ ㈱ 〇一二 ｶﾀｶﾅ ㋿",
    "hangul": "한국어 텍스트 처리 시험입니다 \u1100\u1161\u11a8 ㈜ ㉮",
    "emoji": "ship it 🚀🚀 👩‍👩‍👧 🇯🇵 ✌🏽 done ❤️",
    "combining": "a\u0301\u0323 o\u0308\u0304 Z\u0336a\u0334l\u0338g\u0327o x\u20dd q\u0307\u0323",
    "fullwidth": "ＦＵＬＬＷＩＤＴＨ　ｔｅｘｔ　１２３，ｅｔｃ． ｱｲｳ",
    "ligatures": "ﬁnal ﬂow ﬀ ﬃ ﬄ ﬅ ﬆ Ĳssel ǄǅǆǇ ㎏ ℃ № ™ ½ x² ⅻ",
    "turkish": "İSTANBUL ıstanbul Iğdır DİYARBAKIR i̇ I ı İ",
    "german": "STRASSE Straße GROẞ groß ẞ ß Maße MASSE",
    "mixed_long": " ".join(
        ["Ünïcödé", "ΣΟΦΙΑ", "москва", "東京", "서울", "القاهرة", "ירושלים", "मुंबई",
         "กรุงเทพ", "ﬁ", "Ⅻ", "🙂", "straße", "İzmir"] * 40
    ),
}
