"""High-risk topics (medical, legal, financial decisions) in a turn, English and Chinese.

Keyword and pattern rules, precompiled; no model, no network. A hit means "a person should check
this before acting on it", not that the answer is wrong. Each category first blanks out phrases
where its words mean something harmless ("stock photo", "a legal move in chess", "火药",
"这个变量名合法吗"), then looks for its terms in what is left.

Speed: the text is lower-cased once and the rules are case-sensitive lower-case patterns; the
Chinese terms are plain literal alternations, which `re` scans with a first-character set.
All three categories: ~40 µs for a one-line message, ~0.7 µs a character for long text (measured
on a busy 2-core machine).
"""

from __future__ import annotations

import re

CATEGORIES = ("medical", "legal", "financial")

# ---- medical ----------------------------------------------------------------------------------
_MEDICAL_EN = r"""\b(?:
    dos(?:e|es|age|ages|ing) | overdos\w* |
    prescri(?:be|bed|ption|ptions) | medications? | medicines? | drugs? | pills? | tablets?(?=\s+(?:of|a\s+day|daily)) |
    diagnos(?:is|es|e|ed|ing) | symptoms? | side[\s-]effects? | contraindicat\w* |
    antibiotics? | ibuprofen | paracetamol | acetaminophen | aspirin | insulin | antidepressants? | opioids? |
    chemo(?:therapy)? | cancer | tumou?rs? | diabetes | diabetic | blood\s+pressure | hypertension | cardiac |
    heart\s+attack | chest\s+pains? | fever | migraines? | infections? | allerg(?:y|ies|ic) |
    pregnan(?:t|cy) | vaccin\w* | surgery | therapy | depression | suicid\w* | self[\s-]harm |
    doctors? | physician | pharmacist | hospital | emergency\s+room | treatment\s+(?:for|options?) |
    medical | clinical | disease | illness | injur(?:y|ies|ed) | rash | (?:head|stomach|tooth)ache
)\b | \d+(?:\.\d+)?\s?(?:(?:mg|mcg|µg)\b|毫克)"""
_MEDICAL_EN_NOT = r"""\b(?:
    dose\s+of\s+(?:reality|humou?r|fun|luck|sarcasm|irony|nostalgia|patience) |
    diagnos\w*\s+(?:(?:the|this|that|a|an|my|our|your)\s+)?(?:\w+\s+)?
        (?:error|bug|issue|problem|crash|failure|exception|network|code|build|leak|slowdown|outage|query)s? |
    cancer\s+(?:sign|season|zodiac|horoscope) | (?:zodiac|star)\s+sign\s+(?:is\s+)?cancer |
    doctor\s+who\b | spin\s+doctors? | (?:cabin|spring|gold|football|saturday\s+night)\s+fever |
    (?:great|economic)\s+depression | (?:red|blue)\s+pill | rash\s+(?:decision|choice|move|act)s? |
    (?:malware|virus|ransomware|botnet)\s+infections? | is\s+(?:a|such\s+a|a\s+real)\s+headache
)"""
_MEDICAL_ZH = r"""
    药物|药品|药量|药片|用药|服药|吃药|开药|停药|药方|处方|中药|西药|抗生素|布洛芬|阿司匹林|对乙酰氨基酚|胰岛素|头孢|激素 |
    剂量|诊断|确诊|误诊|症状|病情|病症|病历|治疗|疗法|疗程|手术|化疗|副作用|禁忌症|过敏|感染|炎症|发炎 |
    医生|医师|大夫|医院|急诊|看病|就医|挂号|体检|疫苗|接种 |
    发烧|发热|咳嗽|头痛|头疼|胸痛|腹泻|呕吐|失眠|抑郁|焦虑症|自杀|自残|怀孕|孕妇|流产 |
    癌|肿瘤|糖尿病|血压|血糖|心脏病|中风|哮喘|肺炎|肝炎|新冠|药
"""
_MEDICAL_ZH_NOT = r"""
    后悔药|灵丹妙药|卖的什么药|卖什么药|火药|炸药|农药|弹药|解药|芍药 |
    (?:让|令|叫)(?:我|人)(?:很|非常|有点|特别)?头(?:疼|痛) | 感染力 | (?:电脑|计算机|手机)病毒感染 |
    诊断(?:一下)?(?:这个|这段|我的)?(?:代码|程序|网络|bug|错误|故障|报错) | 巨蟹座
"""

# ---- legal ------------------------------------------------------------------------------------
_LEGAL_EN = r"""\b(?:
    lawsuits? | litigation | sued | suing | sue\s+(?:him|her|them|me|you|us|my|the|a|an|for|someone|somebody|over) |
    (?:can|should|could)\s+i\s+sue | lawyers? | attorneys? | solicitors? | legal | legally | illegal | unlawful |
    court | judge\s+(?:ruled|said|ordered) | plaintiff | defendant | verdict | subpoena |
    contracts? | nda | non[\s-]compete | breach\s+of | liable | evict(?:ion|ed)? | custody | divorce | alimony |
    prenup\w* | (?:write|make|making|writing|draft|update|contest)\s+(?:a|my|the|her|his)\s+will | last\s+will |
    inheritance | probate | copyright\w* | trademark\w* | patents? | infring\w* | defamation | libel | slander |
    arrest(?:ed)? | criminal\s+(?:charges?|record)
)\b"""
_LEGAL_EN_NOT = r"""\b(?:
    (?:il)?legal\s+(?:move|position|character|value|input|instruction|opcode|argument|state|token|syntax|
        identifier|name|operation|memory\s+access|tender)s?\b |
    castling\b | (?:food|tennis|basketball|volleyball|badminton|squash)\s+courts? |
    smart\s+contracts? | (?:api|data|interface|code|design\s+by)\s+contracts? |
    contract(?:s|ed|ing)?\s+(?:a|the)\s+(?:virus|disease|cold|flu|infection) | muscles?\s+contract\w* |
    patent\s+leather | cardiac\s+arrest
)"""
_LEGAL_ZH = r"""
    起诉|上诉|诉讼|打官司|官司|律师|法律|法院|法庭|判决|判刑|违法|犯法|非法|犯罪|合法 |
    合同|合约|违约|协议书|离婚协议|赔偿|索赔|仲裁|劳动纠纷|劳动法|工伤 |
    离婚|抚养权|赡养费|遗嘱|遗产|继承权|侵权|版权|著作权|专利|商标|诽谤|名誉权 |
    被告|原告|刑事|民事|拘留|逮捕|坐牢|报警|立案|取保候审|押金不退
"""
_LEGAL_ZH_NOT = r"""
    (?:合法|非法)的?(?:标识符|变量名?|字符|输入|参数|json|ip|邮箱|格式|请求|指令|走法|内存访问|值) |
    (?:标识符|变量名?|字符串?|输入|参数|json|ip|邮箱|格式|请求|指令|走法|语法)(?:是否|是不是|不)?(?:合法|非法)
"""

# ---- financial --------------------------------------------------------------------------------
_FINANCIAL_EN = r"""\b(?:
    invest(?:ing|ment|ments|or|ors|ed)? | stocks? | shares\s+(?:of|in) | (?:buy|sell|sold|bought)\s+shares |
    equities | etfs? | index\s+funds? | mutual\s+funds? | hedge\s+funds? | portfolio |
    bonds?\s+(?:yields?|market|funds?) | (?:government|treasury|corporate)\s+bonds? | dividends? |
    loans? | mortgages? | refinanc\w* | credit\s+(?:cards?|score|report) | debts? | interest\s+rates? |
    bankrupt\w* | retirement | 401\(?k | roth\s+ira | ira\s+account | pension | annuit\w* | savings\s+accounts? |
    (?:my|our|retirement|life)\s+savings | net\s+worth | crypto(?:currency|currencies)? | bitcoin | ethereum |
    forex | trading | tax(?:es)? | insurance | financial\s+(?:advice|advisor|adviser|planning|decisions?)
)\b"""
_FINANCIAL_EN_NOT = r"""\b(?:
    stock\s+(?:photos?|images?|footage|videos?|music|cubes?|pots?|characters?|phrases?|answers?|firmware|roms?|
        android|kernel|options?\s+in\s+settings) |
    (?:in|out\s+of|back\s+in|low\s+on)\s+stock | stock\s+up | take\s+stock | laughing\s+stock |
    (?:chicken|beef|vegetable|fish|bone|soup)\s+stock |
    (?:design|art|photography|writing|creative|ux)\s+portfolio | portfolio\s+(?:website|site|page) |
    trading\s+(?:cards?|posts?) | horse[\s-]trading | (?:technical|sleep)\s+debt | debt\s+of\s+gratitude |
    carbon\s+tax | pays?\s+dividends | invest(?:ed|ing)?\s+(?:time|effort|energy)\b |
    crypto\s+(?:library|module|api|primitives?|libs?)
)"""
_FINANCIAL_ZH = r"""
    投资|理财|股票|股市|炒股|股价|基金|定投|债券|期货|期权|外汇|比特币|加密货币|虚拟货币|数字货币 |
    贷款|房贷|车贷|网贷|借贷|信用卡|征信|欠款|负债|欠债|还债|利率|利息|年化|收益率|分红|复利 |
    保险|养老金|退休金|公积金|社保|报税|个税|避税|纳税|存款|储蓄|买房|首付|月供|破产
"""
_FINANCIAL_ZH_NOT = r"""
    基金会 | 保险丝 | 保险箱 | 保险柜 | 保险起见 | (?:感情|时间|精力)(?:上的)?投资
"""


def _rules(en: str, zh: str, en_not: str, zh_not: str) -> tuple[re.Pattern, ...]:
    zh_terms = "|".join(re.escape(t) for t in zh.replace("|", " ").split())  # literals only: a fast scan
    # Four passes, not one: an alternation that starts with literals is scanned by its first
    # characters, one that starts with \b is tried at every position.
    return (re.compile(en_not, re.VERBOSE), re.compile(zh_not, re.VERBOSE),
            re.compile(en, re.VERBOSE), re.compile(zh_terms))


_RULES: dict[str, tuple[re.Pattern, ...]] = {  # (harmless en, harmless zh, terms en, terms zh)
    "medical": _rules(_MEDICAL_EN, _MEDICAL_ZH, _MEDICAL_EN_NOT, _MEDICAL_ZH_NOT),
    "legal": _rules(_LEGAL_EN, _LEGAL_ZH, _LEGAL_EN_NOT, _LEGAL_ZH_NOT),
    "financial": _rules(_FINANCIAL_EN, _FINANCIAL_ZH, _FINANCIAL_EN_NOT, _FINANCIAL_ZH_NOT),
}


def _blank(m: re.Match) -> str:
    return " " * len(m.group())


def risk_terms(text: str) -> dict[str, list[str]]:
    """The terms (lower-cased) that put `text` in each high-risk category; categories without a hit
    are left out."""
    text = text.lower()
    found: dict[str, list[str]] = {}
    for category, (not_en, not_zh, terms_en, terms_zh) in _RULES.items():
        # Blank the harmless phrases (with spaces: nothing new joins up across them).
        masked = not_zh.sub(_blank, not_en.sub(_blank, text))
        hits = sorted((m.start(), m.group().strip()) for rx in (terms_en, terms_zh) for m in rx.finditer(masked))
        hits = [h for _, h in hits]
        if hits:
            found[category] = hits
    return found


def risk_flags(user_text: str, answer_text: str = "") -> list[str]:
    """High-risk categories of a turn: those the user's message or the answer touches.

    Args:
        user_text: the user's message.
        answer_text: the model's answer ("" before it exists).

    Returns:
        A subset of ["medical", "legal", "financial"], in that order; [] for none.
    """
    hit = set(risk_terms(user_text)) | (set(risk_terms(answer_text)) if answer_text else set())
    return [c for c in CATEGORIES if c in hit]


_NAMES = {
    "en": {"medical": "medical", "legal": "legal", "financial": "financial"},
    "zh": {"medical": "医疗", "legal": "法律", "financial": "财务"},
}
_EXPERTS = {
    "en": {"medical": "a doctor or pharmacist", "legal": "a lawyer", "financial": "a qualified financial adviser"},
    "zh": {"medical": "医生或药师", "legal": "律师", "financial": "专业理财顾问"},
}


def caution_text(flags: list[str], lang: str = "en") -> str:
    """A one-line caution asking the user to have a person verify the answer; "" when no flags.

    Args:
        flags: categories from `risk_flags` (unknown ones are ignored).
        lang: the UI language: "zh…" (zh, zh-CN, zh_TW) gives Chinese, anything else English.
    """
    flags = [f for f in CATEGORIES if f in flags]
    if not flags:
        return ""
    if lang.lower().startswith("zh"):
        topics = "、".join(_NAMES["zh"][f] for f in flags)
        experts = "、".join(_EXPERTS["zh"][f] for f in flags)
        return f"此回答涉及{topics}问题，可能有误或不适用于你的情况；请在采取行动前向专业人士（{experts}）核实。"
    topics = _join_en([_NAMES["en"][f] for f in flags], "and")
    experts = ", ".join(_EXPERTS["en"][f] for f in flags)
    return (f"This touches on {topics} matters: the answer may be wrong or not fit your situation. "
            f"Check it with a professional ({experts}) before acting on it.")


def _join_en(words: list[str], conj: str) -> str:
    return words[0] if len(words) == 1 else ", ".join(words[:-1]) + f" {conj} " + words[-1]
