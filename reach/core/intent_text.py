"""The words of an intent (pure): text in Chinese, English or both → weighted features.

Chinese has no spaces between words, and no segmenter worth a dependency is kept up to date
(jieba's last release is from 2020), so a run of Chinese characters is cut into overlapping
character n-grams: every bigram ("退货率" → "退货", "货率") weighs about a word, a single
character a little (a one-character word like "税" still counts), a trigram a little more
(a longer shared phrase is better evidence). Which n-grams matter is then decided by how few
capabilities use them (``intent.Index``): the junk bigrams that straddle two words ("月退")
weigh nothing, because no capability declares them. Function words ("一下", "帮我") are cut
out first, and grammatical characters (的, 了, 个, ...) are taken out of the run, so the
words they interrupt still meet: "报个价" has the bigram "报价", "给客户" is "客户".

English is lowercased, stripped of stop words and lightly stemmed (plurals, -ing, -ed,
-ly: "invoices", "invoicing" and "invoiced" are one word); a word's first four letters are a
weaker second feature, so "summary" meets "summarize" and "translation" meets "translate".
Full-width letters and digits (ＳＫＵ－８８１) are folded to ASCII first; numbers alone are
dropped (an order number says nothing about the task).
"""

from __future__ import annotations

import re
import unicodedata

# How much each kind of feature weighs on its own, before its rarity (``intent.Index``).
UNIGRAM = 0.5   # one CJK character: "税", "会"; weak, many words share a character
BIGRAM = 1.0    # two CJK characters: about one Chinese word
TRIGRAM = 0.5   # three CJK characters, on top of the two bigrams inside it
WORD = 1.0      # one English word, stemmed
PREFIX = 0.4    # the first four letters of a word of five or more

_LATIN = re.compile(r"[a-z0-9\u00df-\u024f]+")
_CJK = re.compile(r"[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af\uf900-\ufaff]+")
_STOP = frozenset("""
a an the of for to in on at by from with into about as and or but not no so than then too
me my mine our ours you your yours he him his she her it its we us they them their this that
these those there here i am is are was were be been being has have had do does did done
can could would will shall should may might must let please pls plz kindly just also
what which who whom whose why how when where much many some any all each every very more
most other such own same only up out off over again get got give gave tell show need want
like s t ll re ve d m o
""".split())
# Chinese function words: two-character stretches that say nothing about the task.
_STOP_CJK = frozenset("""
一下 帮我 给我 我要 我想 我们 你们 他们 请问 麻烦 可以 能否 这个 那个 这些 那些 一个 一份
一张 一封 一条 一台 一件 什么 怎么 怎样 如何 是否 是不 不是 多少 有没 没有 的是 是什 么样
""".split())
_STOP_RUN = re.compile("|".join(sorted(_STOP_CJK)))
# Grammatical characters: alone they are not counted, and an n-gram holding one counts
# ``FUNCTION`` of its weight ("是多少", "给客户" say little; "多少钱" still says a price).
_FUNCTION_CHARS = frozenset("的了吗呢吧啊呀么是在有和与或及我你他她它们这那个一把给被让请帮要想"
                            "能就都也还很不没什么怎哪多少几些到过着得地对从为来又再才刚"
                            "份张封笔台种位")
FUNCTION = 0.25


def fold(text: str) -> str:
    """Full-width forms to ASCII (NFKC), then case folded; control characters become spaces."""
    folded = unicodedata.normalize("NFKC", text).casefold()
    return "".join(" " if unicodedata.category(c)[0] == "C" else c for c in folded)


def stem(word: str) -> str:
    """A light English stemmer: plurals, -ing, -ed and -ly off, a final "e" off (so "taxes"
    and "tax", "invoice" and "invoices" meet), a doubled last consonant undone ("shipping" →
    "ship"). Short words are left alone."""
    if len(word) <= 3:
        return word
    w = word
    if w.endswith("ies") and len(w) > 4:
        w = w[:-3] + "y"
    elif w.endswith("s") and not w.endswith(("ss", "us", "is")):
        w = w[:-1]
    if w.endswith("ing") and len(w) >= 6:
        w = w[:-3]
    elif w.endswith("ed") and len(w) >= 5 and not w.endswith("eed"):
        w = w[:-2]
    elif w.endswith("ly") and len(w) >= 6 and not w.endswith(("ily", "ply")):
        w = w[:-2]
    if len(w) > 3 and w[-1] == w[-2] not in "lsz":
        w = w[:-1]
    if len(w) > 3 and w.endswith("e"):
        w = w[:-1]
    return w


def features(text: str) -> dict[str, float]:
    """Each feature of ``text`` with the weight of its kind. English features are words,
    codes ("q3") or ``~`` and a prefix; Chinese ones are n-grams of its characters. No two
    kinds can yield the same feature (a prefix starts with ``~``, a code holds a digit, an
    n-gram with a grammatical character is never one of the content's)."""
    return _features(text, None)


def _features(text: str, said: dict[str, str] | None) -> dict[str, float]:
    """``features``; and when ``said`` is given, each English feature → the first word that
    gave it, put there (``words``: one place says which words count and what they yield)."""
    out: dict[str, float] = {}
    add = out.__setitem__

    folded = fold(text)
    for word in _LATIN.findall(folded):
        if word in _STOP or word.isdigit() or len(word) < 2:
            continue
        if not word.isalpha():
            add(word, WORD)  # a code such as "q3" or "x200": as it is (so ``said`` as well)
            continue
        root = stem(word)
        add(root, WORD)
        if said is not None:
            said.setdefault(root, word)
        if len(word) >= 5:
            prefix = "~" + word[:4]
            add(prefix, PREFIX)
            if said is not None:
                said.setdefault(prefix, word)
    for run in _CJK.findall(folded):
        # Grammatical characters interrupt words ("报个价", "开个票"): the n-grams of the run
        # without them count in full, those that hold one count ``FUNCTION``.
        content = _STOP_RUN.sub("", run)
        content = "".join(c for c in content if c not in _FUNCTION_CHARS)
        for i, char in enumerate(content):
            add(char, UNIGRAM)
            if i + 2 <= len(content):
                add(content[i:i + 2], BIGRAM)
            if i + 3 <= len(content):
                add(content[i:i + 3], TRIGRAM)
        for i in range(len(run) - 1):
            pair = run[i:i + 2]
            if pair not in _STOP_CJK and (pair[0] in _FUNCTION_CHARS or pair[1] in _FUNCTION_CHARS):
                add(pair, BIGRAM * FUNCTION)
    return out


def words(text: str) -> dict[str, str]:
    """Each feature of ``text`` (as ``features`` finds it) → the words a person would
    recognise it by: an English stem or prefix → the word as written (folded), a Chinese
    n-gram → itself. Only for explaining a decision (``intent.Decision.why``), never on the
    routing path."""
    out: dict[str, str] = {}
    for feature in _features(text, out):
        out.setdefault(feature, feature)  # the rest, codes and Chinese n-grams: themselves
    return out


def phrase_key(text: str) -> str:
    """What makes two requests the same request: case, width, punctuation and spacing
    aside ("Stock level?" and "stock  level" are one key)."""
    return " ".join("".join(c if c.isalnum() else " " for c in fold(text)).split())
