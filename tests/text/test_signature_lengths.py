"""Signatures of texts of every length, pinned: empty, one token, short lines, long documents.

Densification's work depends on how many bins a document fills, so these texts
run from no feature to thousands, for small, default and the largest shapes.
The pinned values were computed by simstore before densification took its
shortcut for sparse documents (sigcost, 24d0b56) and must never change.
"""

from __future__ import annotations

import mmh3
import numpy as np
import pytest

import simstore
from simstore import SIGNATURE_CONFIG, FingerprintConfig
from simstore.native import core as _core
from simstore.text.reference import reference_signature, reference_signature_of_hashes

CONFIGS = {
    "default": SIGNATURE_CONFIG,
    "small": FingerprintConfig(ngram=1, weighting="tf", seed=7, sketch_bits=64, bands=1, rows=1),
    "bigrams": FingerprintConfig(ngram=2, seed=3, sketch_bits=1024, bands=32, rows=32),
    "largest": FingerprintConfig(seed=(1 << 32) - 1, sketch_bits=4096, bands=64, rows=16),
}


def _words(n: int, salt: int) -> str:
    """n tokens, almost all distinct, deterministic."""
    return " ".join(f"t{(i * 7919 + salt) % 100003}" for i in range(n))


LENGTH_TEXTS = {
    "empty": "",
    "punctuation": "!!! ... ???",
    "one_token": "Hello",
    "two_tokens": "hello world",
    "title": "Fresh organic apples, 1 kg bag",
    "product": "Stainless steel water bottle 750 ml, leak-proof lid — blue",
    "snippet": "Ångström café: naïve façade in Zürich, 東京 tour, 12 € per person.",
    "repeated": "spam " * 40,
    **{f"words_{n}": _words(n, n) for n in (3, 4, 6, 10, 17, 30, 60, 100, 200, 400, 800,
                                            1500, 3000, 10000)},
}

# (config, text) -> (fingerprint, murmur3 of the sketch words, murmur3 of the band keys).
KAT: dict[tuple[str, str], tuple[int, int, int]] = {
    ("default", "empty"): (0x00A7ABEBDA1BBA76, 0xE154ABC693F74784, 0xBFC0DE4D0FB1562A),
    ("default", "punctuation"): (0x7985A4D67F2FFC4F, 0x880B794C3D65BD65, 0x4B847DD37DF8D493),
    ("default", "one_token"): (0xCBD8A7B341BD9B02, 0x02951501EECC9ACD, 0x1B3607FDE38308CB),
    ("default", "two_tokens"): (0x533F6046EB7F610E, 0x184D4A080EAAAB07, 0x31DA5FA8821A1D3A),
    ("default", "title"): (0x48C1009351677033, 0x26C0D27C55413B59, 0x782A17A6C0F4267C),
    ("default", "product"): (0x934C70401802922D, 0xC0D2F0D55E5A852D, 0x49553439314496C5),
    ("default", "snippet"): (0x280AACD0C52A41E3, 0x37C4E7CEF7F714F7, 0x2AE902EB933DA995),
    ("default", "repeated"): (0x9D83543080795CA3, 0xECC5926D231749C0, 0xA4873DAD419335C5),
    ("default", "words_3"): (0x5EECB7E59FC73AA7, 0x6F4C7FAEC1DC14A4, 0x72B03BEB01E8639E),
    ("default", "words_4"): (0x121A000006A11410, 0x2915285AF6EC145F, 0xD58716647C350A0C),
    ("default", "words_6"): (0x4A94081200A4A3E4, 0xFF3822EB1CDA0CB3, 0xC40A92E2C76D7E9C),
    ("default", "words_10"): (0x00A01EE8A096E000, 0x0E59F0D17B315149, 0x9BCC8F6B31CEF6AC),
    ("default", "words_17"): (0x180ED2647F1A2ABC, 0x605616D55F79468A, 0xB7E52C2879A2C5C3),
    ("default", "words_30"): (0x546D5660714C4080, 0xF7F246B52A9611AD, 0x255C735AFF9F7360),
    ("default", "words_60"): (0x44A9174B37AD7230, 0xCC610B5047EF0C23, 0x748EB2C47C671253),
    ("default", "words_100"): (0xFAB9FE8AD60010C0, 0x06F55289452B19A5, 0x6ED264103F990260),
    ("default", "words_200"): (0x5344A1FA1469A9A8, 0x094CFDC5C497B6B9, 0x06EB6186AC8C95ED),
    ("default", "words_400"): (0x409A3544243E4A1F, 0xE3C6BEFB58926D00, 0x9AB82855ECAD9B39),
    ("default", "words_800"): (0x55E2CB442395C6E9, 0x1EA74E48191C8E1B, 0xFDB6ECCCC51939D2),
    ("default", "words_1500"): (0x723662938B06C8A1, 0xFBCDFCF969F5958F, 0x2EEFF2D7E3F3754C),
    ("default", "words_3000"): (0x9A7F23CE0C3EBE81, 0xCA63E4E0D7E9587D, 0xDE60B7D8C65AC21C),
    ("default", "words_10000"): (0xB8902062D33E398E, 0xAEDE202A266E80CB, 0xDFE0BE3564D8793B),
    ("small", "empty"): (0xFD6A3B285F58372E, 0xFCB81E93CF94E8D9, 0x9E8390220DD87473),
    ("small", "punctuation"): (0x7025A102550E5364, 0x032270B14672D9EC, 0x7C3BE1234F48CE78),
    ("small", "one_token"): (0x47EB53181008E729, 0xF11EEC3C703E8E35, 0x4BA893A315D503C8),
    ("small", "two_tokens"): (0x45E043180000C700, 0x233D459735E80903, 0x7DAD14A7ECBBCC13),
    ("small", "title"): (0x05305C08241A1805, 0x341182CDEC00256E, 0x2F56A6BA2D1637A1),
    ("small", "product"): (0x3BD21C0C225E3082, 0xD9BFEDBA986145E2, 0x7E1058B3B762DDB1),
    ("small", "snippet"): (0x32C2BBEEBE20BA22, 0x29164E218D233E9A, 0xED65F6245D9B615B),
    ("small", "repeated"): (0x35C2137390C423CE, 0xEF3DFF1816EA5598, 0x5071261D99A5FFA2),
    ("small", "words_3"): (0xCD68B32DB4633B11, 0x0AD4EE49F30F8CAC, 0xAFCFBD3C75323423),
    ("small", "words_4"): (0x5A200652B8202590, 0x287F8AA7521E9CCB, 0x867301E01197655C),
    ("small", "words_6"): (0xA17EC908444310A0, 0xF626D7A2EB13793D, 0x3EBA2D3200C3FE4E),
    ("small", "words_10"): (0x80184C03E0084BE5, 0xFA6738DFF20F17C8, 0xEF92B86280D05B48),
    ("small", "words_17"): (0x6267690067B8753C, 0x29B224CF647C8E1F, 0x4C5E506E052921AE),
    ("small", "words_30"): (0x284B3521B87B6E39, 0xBDCF218E82E3B140, 0xF5C2A0944E85A382),
    ("small", "words_60"): (0x2DAA0C6EC4965887, 0xBBF21944B39E7983, 0xB5EBEE742BC32E91),
    ("small", "words_100"): (0xE811799A774A9639, 0xA7AD5BDD9AB06044, 0x8EC8BB857499F65D),
    ("small", "words_200"): (0x9B2D5C0442D75D79, 0xB13227AA9CDE19D2, 0x7F829296B735E6FB),
    ("small", "words_400"): (0x5B43BB88D0386AB1, 0x88612F98D86C3C93, 0x524EB1180E90A2EA),
    ("small", "words_800"): (0x1183C06049C9FC19, 0xB40C45D4C592F9CA, 0xB19B3B0D09055AB9),
    ("small", "words_1500"): (0xA5014BC8F674B9AE, 0xCE642A170FAE4463, 0x900897CB4EB8A742),
    ("small", "words_3000"): (0x7760997A9DFB425C, 0xA77F12F22E4C42FC, 0xAFC684D114F43C5E),
    ("small", "words_10000"): (0x61E19401927C0026, 0xBB4F0D91C043CA92, 0x6D14D7308D5ABEBC),
    ("bigrams", "empty"): (0x25B8875D57B78E97, 0xE2AC5530F11D4E36, 0x15D01DEC5566A4F9),
    ("bigrams", "punctuation"): (0x5FA52E3650D4D933, 0x37A8E1B9276F0D83, 0xB23B806204197B7D),
    ("bigrams", "one_token"): (0x084AD4BB6B86B133, 0xA36BDC53B232AC0A, 0xA171E49EEA920558),
    ("bigrams", "two_tokens"): (0xBE355BD07358BB1B, 0x1CBA1EDF21128901, 0x749FB1C6856753CC),
    ("bigrams", "title"): (0xB7100263605AF37E, 0xD94E975380BDF7E3, 0x46C4FCD05F37E5BA),
    ("bigrams", "product"): (0x236610B1DEC9D29F, 0x308E3409B7DF1776, 0x3B7D772E0C2D4348),
    ("bigrams", "snippet"): (0xC39430D82E3D36B4, 0x7FE09F88B50389B3, 0x1513D2568C6C2C1A),
    ("bigrams", "repeated"): (0x118A49E16C4835E1, 0xA574EDA1209041D6, 0xF1523C3E6929297A),
    ("bigrams", "words_3"): (0x00250CC500210102, 0xAED0BE53EAA7257B, 0x01F546E127EC9182),
    ("bigrams", "words_4"): (0x47CF679CA139B989, 0x9F8F7EC62B0F533D, 0x4788550D31FE8D4B),
    ("bigrams", "words_6"): (0x86EE34A0500965C9, 0xFD42CAD2D04C710F, 0x785CFE471757EF16),
    ("bigrams", "words_10"): (0xAD324358A626852E, 0xF17AF16EE3A0BE93, 0x8EB21552009AB1EE),
    ("bigrams", "words_17"): (0x1EC4E65E63A8D0E7, 0x7EA3BFC4401542FE, 0x5FE8DA3351B571DA),
    ("bigrams", "words_30"): (0x93001179A76EBD09, 0x0B0FACF2B5E1DB44, 0xC00DFF771DA35E61),
    ("bigrams", "words_60"): (0x145C6B56B63E0F3C, 0x16F4A0B2A95DAB99, 0x1048CAAF4A020259),
    ("bigrams", "words_100"): (0x64C422A9AD8EAB64, 0x5754250CEDE7C8F8, 0xC2EE04A2254DF715),
    ("bigrams", "words_200"): (0xE6E0E513728806C0, 0xEF171686AB77A7F1, 0x7553538E7DFD52C4),
    ("bigrams", "words_400"): (0xEDF1A9259E13CD36, 0x61513CB3F12C9635, 0xB7E0B5CD731ABEC8),
    ("bigrams", "words_800"): (0xA9274ABFA8B6B247, 0x19C324FAE7A9D9FB, 0x02B0A7AC83E90FC6),
    ("bigrams", "words_1500"): (0x4385F6B3FF322383, 0x376680A85D3C13C7, 0xEC4AFD4E89030EC5),
    ("bigrams", "words_3000"): (0x5026520EA212F902, 0xA2512BCF947569B2, 0x7CE9471A3C3E13B1),
    ("bigrams", "words_10000"): (0x0913B713375B4082, 0x9B332A9138824193, 0x35FC411824C6A235),
    ("largest", "empty"): (0x789A86BF131D6A4F, 0x79668FCF423D428B, 0x0D9CEC1122583220),
    ("largest", "punctuation"): (0x3D3A34C66F4DFAAC, 0xD5BC2E328E7E0954, 0xC90D44F7AEA4F062),
    ("largest", "one_token"): (0x347BAD75D7575E14, 0x2A6FE15D9C4C55B4, 0x63C24CBC629B30AF),
    ("largest", "two_tokens"): (0xD88E17369E012049, 0x31B8EEF19F45425A, 0xBF30013450C55F77),
    ("largest", "title"): (0x0041B734901E95F1, 0xE8A12F678DC5A7BE, 0x7133E2FF6DEB8D24),
    ("largest", "product"): (0x2000240115FCF121, 0x69FA6E90767D8F06, 0xDF8895800EA3C913),
    ("largest", "snippet"): (0x06FD9130603E25A7, 0x3EC31529E6FC430E, 0xFCB70AC6D35BFF48),
    ("largest", "repeated"): (0x87C18E3860BE736A, 0x3ED0F31DC89B89E9, 0x8EDFDDAC6EA4E7CA),
    ("largest", "words_3"): (0x0A61DC41966FA105, 0x4E0BDE206CC35751, 0x16D75BF60279B75B),
    ("largest", "words_4"): (0x4452A08A86000148, 0x19143B04271BF2BD, 0x65F6147BF4DE682D),
    ("largest", "words_6"): (0x23820800014A43C1, 0x52B6955F8B282F6E, 0x93FE6F6E622BA66C),
    ("largest", "words_10"): (0xFCAE200194E11101, 0x328D2256A04897DB, 0xAC59FBCA069409AA),
    ("largest", "words_17"): (0x8290D4A9BF4F6687, 0x7BD22DED42F56435, 0x41415A066D116FED),
    ("largest", "words_30"): (0x0F68B2A15960A9CA, 0xA38D08E07700468A, 0x58998EDCA33D9309),
    ("largest", "words_60"): (0x43923BC80D2C08C2, 0x07B85EB65EDE1597, 0xE4B3E37DC06EE590),
    ("largest", "words_100"): (0x16C124CCA804E813, 0xB0FAAD8472BC38A8, 0xEBE213CE15716A45),
    ("largest", "words_200"): (0x5DB8C3C3D839A442, 0x03969F273F1894FC, 0x9C5270992840914D),
    ("largest", "words_400"): (0xC81CFAD84C67476A, 0xBAD8FD9A1844CBFD, 0xA3160E4DD124C8C1),
    ("largest", "words_800"): (0x9812C9CECD375EC2, 0x83C2056787F7D7B8, 0x3ADD2B426A7922E5),
    ("largest", "words_1500"): (0x0F6AA9709625A67E, 0x0857346B00E9ACCF, 0x3238497AE4344D4B),
    ("largest", "words_3000"): (0x8439695DFCAECB70, 0x083520500810220E, 0x6A043E8D234E25ED),
    ("largest", "words_10000"): (0x91DBEB1106BCF03E, 0x39310177783B9BA0, 0x96D19C694D5F8E4D),
}


def _digest(words: np.ndarray) -> int:
    return mmh3.hash64(np.asarray(words, dtype="<u8").tobytes(), 0, signed=False)[0]


@pytest.mark.parametrize("cname", list(CONFIGS))
def test_pinned_signatures_of_every_length(cname):
    """A batch of texts from empty to 10,000 tokens gives the pinned signatures."""
    names = list(LENGTH_TEXTS)
    sigs = simstore.signatures([LENGTH_TEXTS[n] for n in names], CONFIGS[cname])
    got = {(cname, n): (s.fingerprint, _digest(s.sketch), _digest(s.bands))
           for n, s in zip(names, sigs, strict=True)}
    assert got == {k: v for k, v in KAT.items() if k[0] == cname}


@pytest.mark.parametrize("cname, name", [
    ("default", "empty"), ("default", "one_token"), ("default", "title"),
    ("default", "words_30"), ("default", "words_400"), ("largest", "title"),
])
def test_each_alone_equals_the_reference(cname, name):
    """One text per call equals the pure-Python reference."""
    sig = simstore.signature(LENGTH_TEXTS[name], CONFIGS[cname])
    assert (sig.fingerprint, sig.sketch.tolist(), sig.bands.tolist()) == reference_signature(
        LENGTH_TEXTS[name], CONFIGS[cname])


@pytest.mark.parametrize("size", [1, 2, 3, 5, 8, 13, 40, 90, 200, 700, 1280, 3000])
def test_hash_sets_of_every_size_equal_the_reference(size):
    """The hash-set entry point equals the reference from one feature to more than the bins."""
    h = np.array([(i * 0x9E3779B97F4A7C15 + size) % (1 << 64) for i in range(size)],
                 dtype=np.uint64)
    cfg = SIGNATURE_CONFIG
    sk, bk = _core.signature_hashes(h, np.array([0, size], dtype=np.int64), cfg.seed,
                                    cfg.sketch_bits, cfg.bands, cfg.rows)
    words, keys = reference_signature_of_hashes({int(x) for x in h}, cfg)
    assert (sk[0].tolist(), bk[0].tolist()) == (words, keys)


def test_densify_tables_are_checked_against_the_shape():
    """The C core refuses a densify table of another seed or size; the binding refuses bad sizes."""
    cfg = SIGNATURE_CONFIG
    h = np.array([1, 2, 3], dtype=np.uint64)
    off = np.array([0, 3], dtype=np.int64)
    sk = np.empty((1, cfg.sketch_bits // 64), dtype=np.uint64)
    bk = np.empty((1, cfg.bands), dtype=np.uint64)
    u32, u64 = (lambda a: _core.ffi.from_buffer("uint32_t[]", a)), _core._u64_ptr
    right_s = _core.densify_table(cfg.seed, 2 * cfg.sketch_bits)
    right_b = _core.densify_table(cfg.seed, cfg.bands * cfg.rows)
    for ts, tb in ((_core.densify_table(cfg.seed + 1, 2 * cfg.sketch_bits), right_b),
                   (right_s, _core.densify_table(cfg.seed, cfg.bands * cfg.rows + 1))):
        rc = _core.lib.ss_signature_hashes(u64(h), _core.ffi.from_buffer("int64_t[]", off), 1,
                                           cfg.seed, cfg.sketch_bits, cfg.bands, cfg.rows,
                                           u32(ts), u32(tb), u64(sk), u64(bk))
        assert rc == -2
    for bad in (0, -1, 8193):
        with pytest.raises(simstore.SimstoreError):
            _core.densify_table(0, bad)
