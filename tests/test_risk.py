"""risk_flags: bilingual positives per category, harmless look-alikes, caution lines."""

import pytest

from engine.routing.risk import caution_text, risk_flags, risk_terms

POSITIVES = [
    # medical
    ("What dose of ibuprofen can I give a 5 year old?", ["medical"]),
    ("Is 800 mg of paracetamol too much?", ["medical"]),
    ("I have chest pain and a fever, what should I do?", ["medical"]),
    ("What are the side effects of this medication?", ["medical"]),
    ("Can you diagnose my rash from these symptoms?", ["medical"]),
    ("布洛芬一次吃几片？", ["medical"]),
    ("这个药的剂量是多少？", ["medical"]),
    ("我头痛发烧三天了，是什么病？", ["medical"]),
    ("医生诊断我有高血压，需要吃药吗？", ["medical"]),
    ("孕妇可以吃感冒药吗", ["medical"]),
    # legal
    ("Can I sue my landlord for not returning the deposit?", ["legal"]),
    ("Is this non-compete contract enforceable?", ["legal"]),
    ("Do I need a lawyer to write a will?", ["legal"]),
    ("Is it legal to record a phone call without consent?", ["legal"]),
    ("I got arrested last night, what are my rights?", ["legal"]),
    ("我想起诉我的老板拖欠工资", ["legal"]),
    ("这份合同有什么风险？", ["legal"]),
    ("离婚后孩子的抚养权归谁？", ["legal"]),
    ("需要请律师吗？", ["legal"]),
    ("公司违法解雇我，可以要求赔偿吗", ["legal"]),
    # financial
    ("Should I buy Tesla stock now?", ["financial"]),
    ("Is it smart to invest my savings account money in bitcoin?", ["financial"]),
    ("Should I refinance my mortgage at this interest rate?", ["financial"]),
    ("How much should I put into my 401(k)?", ["financial"]),
    ("Can I get a loan to pay off credit card debt?", ["financial"]),
    ("我应该买哪只股票？", ["financial"]),
    ("现在适合买基金理财吗", ["financial"]),
    ("房贷利率降了，要不要提前还贷款？", ["financial"]),
    ("比特币还能投资吗", ["financial"]),
    ("买什么保险比较好？", ["financial"]),
]

MULTI = [
    ("My doctor says the surgery costs $20k; should I take a loan or sue the insurer?",
     ["medical", "legal", "financial"]),
    ("医疗事故可以起诉医院要求赔偿吗？", ["medical", "legal"]),
    ("买股票亏了钱，可以告券商违法吗？", ["legal", "financial"]),
]

NEGATIVES = [
    "Where can I find a stock photo of a cat?",
    "Is castling a legal move in chess?",
    "That is an illegal move for a knight.",
    "Is the item in stock or out of stock?",
    "How do I make chicken stock for soup?",
    "Diagnose this Python error: KeyError on line 3.",
    "Can you diagnose the network problem on my router?",
    "My zodiac sign is Cancer, what does that say about me?",
    "Let's play tennis on the tennis court.",
    "How do I write a smart contract in Solidity?",
    "I invested time in learning Rust.",
    "Technical debt slows our team down.",
    "What is the capital of France?",
    "Tell me a joke about cats.",
    "Apr 5: lunch with Ira.",
    "Check out my design portfolio website.",
    "这是火药的历史。",
    "这个问题真让我头疼。",
    "这个变量名合法吗？",
    "他后悔药都没得吃。",
    "巨蟹座的人性格怎么样？",
    "基金会今天举办活动。",
    "为了保险起见，我带了伞。",
    "今天天气怎么样？",
    "请写一首关于春天的诗。",
    "帮我诊断一下这段代码的错误",
]


@pytest.mark.parametrize("text,expected", POSITIVES + MULTI)
def test_high_risk_topics_are_flagged(text, expected):
    assert risk_flags(text) == expected


@pytest.mark.parametrize("text", NEGATIVES)
def test_harmless_lookalikes_are_not_flagged(text):
    assert risk_flags(text) == [], risk_terms(text)


def test_answer_text_counts_too_and_order_is_fixed():
    assert risk_flags("What should I do?", "Take 400 mg of ibuprofen every 6 hours.") == ["medical"]
    assert risk_flags("Tell me about bonds.", "") == []
    assert risk_flags("找律师", "先去医院") == ["medical", "legal"]


def test_terms_say_what_matched():
    assert risk_terms("Should I buy stock or pay my mortgage? 股票") == {"financial": ["stock", "mortgage", "股票"]}
    # The harmless phrase is blanked, the risky one in the same text still counts.
    assert risk_terms("A stock photo, then: should I buy Apple stock?") == {"financial": ["stock"]}


def test_caution_lines_in_both_languages():
    assert caution_text([], "en") == "" and caution_text(["unknown"], "zh") == ""
    en = caution_text(["financial", "medical"], "en")
    assert en.startswith("This touches on medical and financial matters")
    assert "a doctor or pharmacist, a qualified financial adviser" in en
    zh = caution_text(["legal"], "zh-CN")
    assert zh == "此回答涉及法律问题，可能有误或不适用于你的情况；请在采取行动前向专业人士（律师）核实。"
    assert caution_text(["legal"], "fr") == caution_text(["legal"], "en")


def test_long_input_is_fast():
    import time

    text = ("The weather is nice and we walked along the river to the old town. " * 3000
            + "天气很好，我们沿着河边走到了老城区。" * 3000)
    t0 = time.perf_counter()
    assert risk_flags(text) == []
    assert time.perf_counter() - t0 < 2.0  # generous: ~400 KB of text; catastrophic backtracking would blow it
