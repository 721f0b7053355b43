"""The words of an intent (reach/core/intent_text.py): folding, stemming and the weighted
features of Chinese, English and mixed text."""

from __future__ import annotations

import pytest

from reach.core.intent_text import features, fold, phrase_key, stem, words


def test_fold_makes_full_width_ascii_lowercase_and_control_characters_spaces() -> None:
    assert fold("ＳＫＵ－８８１") == "sku-881"
    assert fold("Ｒｅｆｕｎｄ") == "refund"
    assert fold("a\x00b\x07c\u200bd\ne") == "a b c d e"  # \u200b is a format character
    assert fold("查库存") == "查库存"


@pytest.mark.parametrize("word, stemmed", [
    ("tax", "tax"), ("fee", "fee"), ("ups", "ups"),         # three letters or fewer: alone
    ("fees", "fee"), ("ties", "tie"),                       # -ies → -y only past 4 letters
    ("queries", "query"), ("cities", "city"), ("skies", "sky"), ("axes", "axe"),
    ("classes", "class"), ("taxes", "tax"), ("boxes", "box"), ("matches", "match"),
    ("wishes", "wish"), ("quizzes", "quizz"),
    ("orders", "order"), ("status", "status"), ("address", "address"), ("analysis", "analysis"),
    ("meetings", "meet"), ("meeting", "meet"), ("bring", "bring"), ("shipping", "ship"),
    ("billing", "bill"), ("calling", "call"), ("invoicing", "invoic"), ("asking", "ask"),
    ("during", "dur"),
    ("returned", "return"), ("shipped", "ship"), ("used", "used"), ("speed", "speed"),
    ("needed", "need"), ("agreed", "agreed"), ("fixed", "fix"), ("owed", "owed"),
    ("weekly", "week"), ("monthly", "month"), ("daily", "daily"), ("family", "family"),
    ("supply", "supply"), ("apply", "apply"), ("early", "early"),
    ("invoice", "invoic"), ("invoices", "invoic"), ("rate", "rat"), ("rates", "rat"),
    ("free", "fre"), ("stock", "stock"), ("passes", "pass"),
    ("fuzz", "fuzz"), ("buzzes", "buzz"), ("dress", "dress"), ("bills", "bill"),
])
def test_stem_is_light_and_leaves_short_words_alone(word: str, stemmed: str) -> None:
    assert stem(word) == stemmed


def test_stem_undoes_a_doubled_consonant_but_not_l_s_or_z() -> None:
    assert stem("planned") == "plan"
    assert stem("stopping") == "stop"
    assert stem("filled") == "fill"
    assert stem("buzzing") == "buzz"
    assert stem("kissing") == "kiss"
    assert stem("annn") == "ann"       # four letters: a doubled last letter goes
    assert stem("abbe") == "abb"       # four letters: a final e goes (after the undoubling)


def test_english_words_are_stemmed_and_stop_words_numbers_and_letters_dropped() -> None:
    assert features("Show me the REFUNDS for order 7781 please") == {
        "refund": 1.0, "~refu": 0.4, "order": 1.0, "~orde": 0.4}
    assert features("a b c 42 2024") == {}
    assert features("tax") == {"tax": 1.0}                # four letters or fewer: no prefix
    assert features("Q3 sales") == {"q3": 1.0, "sal": 1.0, "~sale": 0.4}
    assert features("x200 sf123456") == {"x200": 1.0, "sf123456": 1.0}  # codes: as they are
    assert features("Résumé") == {"résumé": 1.0, "~résu": 0.4}


def test_a_prefix_is_weaker_than_a_word_and_never_replaces_it() -> None:
    # "summ" from "summary" and "summarize": the two meet at 0.4; the word itself is 1.0.
    both = features("summary summarize")
    assert both == {"summary": 1.0, "summariz": 1.0, "~summ": 0.4}
    assert features("trans transfer") == {"tran": 1.0, "transfer": 1.0, "~tran": 0.4}
    # A word equal to a prefix form is never lowered by it (the larger weight is kept).
    assert features("tran transit") == {"tran": 1.0, "transit": 1.0, "~tran": 0.4}


def test_chinese_runs_give_unigrams_bigrams_and_trigrams() -> None:
    assert features("税") == {"税": 0.5}
    assert features("库存") == {"库": 0.5, "存": 0.5, "库存": 1.0}
    assert features("退货率") == {"退": 0.5, "货": 0.5, "率": 0.5, "退货": 1.0, "货率": 1.0,
                                 "退货率": 0.5}


def test_function_words_are_cut_out_and_grammatical_characters_skipped() -> None:
    # "一下" is cut out of the run, and 查 meets 库存 across it.
    assert features("查一下库存") == {**features("查库存"), "查一": 0.25}
    assert features("查库存") == {"查": 0.5, "库": 0.5, "存": 0.5, "查库": 1.0, "库存": 1.0,
                               "查库存": 0.5}
    # 个 is grammatical: 报价 meets across it; the bigrams holding it count a quarter.
    got = features("报个价")
    assert got == {"报": 0.5, "价": 0.5, "报价": 1.0, "报个": 0.25, "个价": 0.25}
    # A function word is not counted even as a bigram with a grammatical character.
    assert "一下" not in features("一下")
    assert features("的了吗") == {"的了": 0.25, "了吗": 0.25}
    assert features("的") == {}


def test_a_feature_has_the_weight_of_its_one_kind_however_often_it_occurs() -> None:
    assert features("报价 报价") == features("报价")
    assert features("报个价 报价") == {"报": 0.5, "价": 0.5, "报价": 1.0, "报个": 0.25,
                                     "个价": 0.25}
    # The last characters of a run give no short "trigram" that would lower a bigram.
    assert features("退货率高") == {"退": 0.5, "货": 0.5, "率": 0.5, "高": 0.5, "退货": 1.0,
                                  "货率": 1.0, "率高": 1.0, "退货率": 0.5, "货率高": 0.5}
    assert features("日报")["日报"] == 1.0 and features("日")["日"] == 0.5


def test_mixed_and_full_width_text() -> None:
    got = features("帮我 check 一下 ＳＫＵ－８８１ 的库存")
    assert got["check"] == 1.0 and got["sku"] == 1.0 and got["库存"] == 1.0
    assert "881" not in got and "帮我" not in got and "一下" not in got
    assert features("refund 一下这笔订单")["refund"] == 1.0
    assert features("refund 一下这笔订单")["订单"] == 1.0


def test_japanese_and_korean_are_cut_like_chinese() -> None:
    assert features("在庫") == {"庫": 0.5, "在庫": 0.25}  # 在 is grammatical in Chinese
    assert features("재고") == {"재": 0.5, "고": 0.5, "재고": 1.0}
    assert features("カタ") == {"カ": 0.5, "タ": 0.5, "カタ": 1.0}


def test_only_punctuation_symbols_or_spaces_have_no_features() -> None:
    for text in ("", "   ", "？？？", "!!! ... ---", "\x00\x01\x02", "😀😀", "1234 5678"):
        assert features(text) == {}, text


def test_words_name_each_feature_by_the_first_word_as_written_that_gave_it() -> None:
    # "refund" and "~refu" from "refunds" (the first), not from "refunding"; a code as it is;
    # stop words, numbers and single letters give nothing, as in ``features``.
    said = words("The REFUNDS, refunding and Q3 for order 7781, a x")
    assert said == {"refund": "refunds", "~refu": "refunds", "q3": "q3", "order": "order",
                    "~orde": "order"}
    assert said.keys() == features("The REFUNDS, refunding and Q3 for order 7781, a x").keys()


def test_words_name_a_chinese_n_gram_by_itself_and_cover_every_feature_of_mixed_text() -> None:
    text = "查一下 invoices 退货率"
    said = words(text)
    assert said.keys() == features(text).keys()
    assert said["invoic"] == "invoices" and said["~invo"] == "invoices"
    assert all(said[f] == f for f in features("查一下 退货率"))


def test_words_of_nothing_to_say_are_empty() -> None:
    assert words("the a 42 !!") == {}


@pytest.mark.parametrize(("one", "other"), [
    ("Stock level?", "stock  level"), ("ＳＴＯＣＫ　ＬＥＶＥＬ", "stock level"),
    ("  退货率？ ", "退货率"), ("sku-881/q3", "sku 881 q3")])
def test_a_phrase_key_ignores_case_width_punctuation_and_spacing(one: str, other: str) -> None:
    assert phrase_key(one) == phrase_key(other) == " ".join(phrase_key(other).split())


def test_a_phrase_key_keeps_words_and_their_order() -> None:
    assert phrase_key("Stock level?") == "stock level"
    assert phrase_key("level stock") != phrase_key("stock level")
    assert phrase_key("?!") == ""
