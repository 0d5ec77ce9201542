"""The prompt token estimate by script, held to a real tokenizer (cl100k_base, read offline).

The estimate guards the cost ceiling and the context fit, so it must not count a prompt as
cheaper than the provider will: four characters a token undercounted Persian about threefold
and CJK fourfold, and 1.2 tokens for every non-ASCII character Georgian, Ethiopic or Braille
about twofold. The calibration test reads the project's shared prompt data,
`/work/shared/data/prompts/` (English and Persian, see its README), and skips where it is not.
"""

from __future__ import annotations

import base64
import json
import unicodedata
import zlib
from itertools import pairwise
from pathlib import Path

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from router.classify.types import RequestView
from router.pipeline import estimate_prompt_tokens
from router.token_estimate import UNITS_PER_TOKEN, WEIGHTS_FILE, text_tokens, utf8_tokens
from tests.support.tokenizer import cl100k_counter

SHARED_PROMPTS = Path("/work/shared/data/prompts")
REPO = Path(__file__).resolve().parents[2]
WEIGHTS = zlib.decompress(WEIGHTS_FILE.read_bytes())


def _weight(char: str) -> float:
    """The table's weight of a non-ASCII character: its own, or beyond U+FFFF its block's (the
    weight of its high surrogate)."""
    cp = ord(char)
    unit = cp if cp <= 0xFFFF else 0xD800 + ((cp - 0x10000) >> 10)
    return WEIGHTS[unit] / UNITS_PER_TOKEN

# Sentences written for this test (no CJK, Hindi or Arabic text is in the project's data).
OTHER_SCRIPTS = {
    "chinese": "请帮我写一封邮件给我的老板，说明我下周一因为家里有事需要请假一天，并且保证会在周二"
               "之前完成所有的工作任务。人工智能正在改变我们的生活方式，从医疗诊断到自动驾驶，各个"
               "领域都在经历深刻的变革。",
    "japanese": "来週の月曜日に東京で会議があります。資料の準備をお願いできますか？また、新しいプロ"
                "ジェクトの予算についても確認したいと思います。よろしくお願いいたします。",
    "korean": "다음 주 월요일에 서울에서 회의가 있습니다. 자료 준비를 부탁드려도 될까요? 또한 새 "
              "프로젝트의 예산에 대해서도 확인하고 싶습니다. 감사합니다.",
    "hindi": "कृपया मेरे बॉस को एक ईमेल लिखने में मेरी मदद करें कि मुझे अगले सोमवार को पारिवारिक "
             "कारणों से छुट्टी चाहिए।",
    "arabic": "من فضلك ساعدني في كتابة رسالة إلى مديري لأخبره أنني أحتاج إلى إجازة يوم الاثنين "
              "القادم بسبب ظروف عائلية.",
}

# Emoji-heavy texts written for this test: emoji (2-3 cl100k_base tokens each) in sequences
# with skin tones, joiners, flags and variation selectors, and mathematical letters.
EMOJI = {
    "party": "Great job team 🎉🎉🎉 see you all tomorrow 👋😊",
    "faces": "😀😃😄😁😆😅😂🤣🥲☺️😊😇🙂🙃😉😌😍🥰😘😗",
    "hearts": "I love this ❤️❤️❤️ so much 😍😍 thank you 🙏🏽 #blessed ✨✨",
    "families": "👨‍👩‍👧‍👦 👩‍❤️‍👨 🧑‍💻 🏳️‍🌈 👨🏽‍🍳",
    "flags": "🇮🇷 🇺🇸 🇬🇧 🇫🇷 🇩🇪 🇯🇵 🏴󠁧󠁢󠁥󠁮󠁧󠁿",
    "persian": "سلام دوستان 🌹🌹 امروز خیلی خوشحالم 😊🎉 ممنون از همه ❤️",
    "only emoji": "🚀🔥💯👀🤖🧠📈💡🎯🛠️",
    "math letters": "𝐁𝐨𝐥𝐝 𝑰𝒕𝒂𝒍𝒊𝒄 𝔉𝔯𝔞𝔨𝔱𝔲𝔯",
}


def test_ascii_letters_and_spaces_are_four_a_token_and_other_ascii_characters_more() -> None:
    """Prose is four letters or spaces a token; a digit one token (cl100k_base cuts numbers
    into runs of at most three), punctuation and line breaks, which it takes in ones and twos,
    0.55 of a token each."""
    view = RequestView(messages=(("system", "a" * 41), ("user", "b c " * 100)))
    assert text_tokens("x" * 400) == 100
    assert estimate_prompt_tokens(view) == (41 + 400) // 4 + 4 * 2
    assert text_tokens("0123456789") == pytest.approx(10 * 1.0)
    assert text_tokens("x = f(1);\n") == pytest.approx(4 / 4 + 1.0 + 5 * 0.55)  # "x", "f", 2 spaces


def test_case_changes_count_only_in_a_text_of_many_capitals() -> None:
    """A lower-case letter followed by a capital is 2.5 tokens more in a text whose capitals
    are over an eighth of it (base64, which cl100k_base cuts into pieces of two or three
    characters); in prose, where a capital starts a sentence or a name, and in code of a few
    camelCase names, it is not read."""
    assert text_tokens("aBcD") == pytest.approx(4 / 4 + 2 * 2.5)
    assert text_tokens("Hello there, iPhone user") == pytest.approx(23 / 4 + 0.55)
    encoded = base64.b64encode(bytes(range(256)) * 4).decode()
    assert text_tokens(encoded) >= cl100k_counter()(encoded)


def test_other_characters_count_their_weight_in_the_table() -> None:
    """ASCII characters inside a non-ASCII text count as in an ASCII one, every other character
    its weight in the generated table: about a token for a Persian or common Chinese letter,
    two or more where cl100k_base has no token for the character (a Georgian letter, a rare
    ideograph), and beyond U+FFFF its block's weight."""
    assert text_tokens("سلام دنیا") == pytest.approx(1 / 4 + sum(map(_weight, "سلامدنیا")))
    assert text_tokens("سلام 12") == pytest.approx(sum(map(_weight, "سلام")) + 1 / 4 + 2 * 1.0)
    assert text_tokens("你好") == pytest.approx(_weight("你") + _weight("好"))
    assert 0.9 <= _weight("ل") <= 1.3 and 1.0 <= _weight("你") <= 1.3
    assert _weight("ა") >= 2 and _weight("龘") >= 2.2 and _weight("\U00020000") >= 4
    assert text_tokens("\ud800") == pytest.approx(_weight("\U00010000"))  # a lone surrogate
    assert WEIGHTS[:128] == bytes(128) and WEIGHTS[0xDC00:0xE000] == bytes(0x400)


def test_utf8_json_counts_as_its_text_does() -> None:
    """Serialised tool schemas and arguments: ASCII bytes as ASCII text, and a non-ASCII text
    as many tokens as the text itself (not its three UTF-8 bytes per CJK character / 4)."""
    assert utf8_tokens(b'{"a": 1}') == pytest.approx(text_tokens('{"a": 1}'))
    assert utf8_tokens(b'{"a": 1}') == pytest.approx(2 / 4 + 1.0 + 5 * 0.55)
    assert utf8_tokens('"你好"'.encode()) == pytest.approx(text_tokens('"你好"'))


def test_the_estimate_covers_cl100k_on_cjk_hindi_and_arabic() -> None:
    """Each sentence's estimate is at least its cl100k_base count (four characters a token
    was under a third of it), and not more than twice it."""
    count = cl100k_counter()
    for script, text in OTHER_SCRIPTS.items():
        actual = count(text)
        assert len(text) / 4 < actual / 2, script  # what the old estimate missed
        assert actual <= text_tokens(text) <= 2 * actual, (script, actual, text_tokens(text))


# A sentence or a run of characters per script, most from an audit of the estimate against
# cl100k_base (estimate / count at 1.2 tokens a non-ASCII character in brackets): each is
# counted 0.97-1.57 now, Cyrillic 1.79-2.18.
SCRIPTS = {
    "amharic (0.42)": "እባክዎን በሚቀጥለው ሰኞ በቤተሰብ ምክንያት እረፍት እንደሚያስፈልገኝ ለአለቃዬ ኢሜል እንድጽፍ እርዱኝ።",
    "ethiopic numbers (0.41)": "፩፪፫፬፭፮፯፰፱፲ ፣፤፥፦፧፨" * 3,
    "cherokee (0.41)": "ᏣᎳᎩ ᎦᏬᏂᎯᏍᏗ ᎠᏂᏴᏫ ᏗᏓᏂᏱᏍᎩ ᎤᏂᎦᏚ",
    "yi (0.42)": "ꆈꌠꁱꂷ ꀉꂿꌠ ꆏꀃ ꌋꆀꁮ",
    "inuktitut (0.42)": "ᐃᓄᒃᑎᑐᑦ ᐅᖃᐅᓯᖅ ᐊᑐᖅᑕᐅᓲᖅ ᓄᓇᕗᒻᒥ",
    "mongolian (0.41)": "ᠮᠣᠩᠭᠣᠯ ᠬᠡᠯᠡ ᠪᠢᠴᠢᠭ ᠦᠨ ᠰᠤᠷᠭᠠᠯ",
    "korean decomposed (0.41)": unicodedata.normalize(
        "NFD", "다음 주 월요일에 서울에서 회의가 있습니다. 자료 준비를 부탁드려도 될까요?"),
    "arabic presentation forms (0.42)": "ﻻ ﺍﻟﺴﻼﻡ ﻋﻠﻴﻜﻢ ﻭﺭﺣﻤﺔ ﺍﻟﻠﻪ ﻭﺑﺮﻛﺎﺗﻪ ﻣﺮﺣﺒﺎ ﺑﻜﻢ",
    "rare ideographs (0.46)": "龘靐齉齾爩鱻麤龗灪籲饢鬱爨驫貔貅麒麟饕餮魑魅魍魎",
    "braille (0.54)": "⣿⣿⣿⣿⡿⠿⠛⠋⠉⠉⠉⠉⠙⠛⠿⢿⣿⣿⣿⣿\n⣿⣿⠟⠁⠀⠀⠀⠀⠀⠀⠀⠀⠀⠀⠀⠀⠈⠻⣿⣿\n" * 6,
    "zalgo (0.54)": "H\u0335\u0321\u031b\u0334\u0358e\u0337\u0322\u0340\u035dl\u0336\u0327\u0350"
                    "\u0360l\u0338\u0328o\u0334\u0321 w\u0335\u0322o\u0336r\u0337l\u0338d" * 5,
    "lao (0.56)": "ກະລຸນາຊ່ວຍຂ້ອຍຂຽນອີເມວຫາເຈົ້ານາຍວ່າຂ້ອຍຕ້ອງການລາພັກວັນຈັນໜ້າຍ້ອນເຫດຜົນຄອບຄົວ",
    "sinhala (0.57)": "කරුණාකර මගේ ලොක්කාට ඊමේල් එකක් ලිවීමට මට උදව් කරන්න, ඊළඟ සඳුදා පවුලේ හේතු "
                      "නිසා මට නිවාඩු අවශ්\u200dයයි.",
    "armenian (0.57)": "Խնդրում եմ օգնեք ինձ նամակ գրել իմ ղեկավարին, որ հաջորդ երկուշաբթի "
                       "ընտանեկան պատճառներով արձակուրդ է պետք։",
    "full-width (0.58)": "Ｐｌｅａｓｅ ｗｒｉｔｅ ａ ｓｈｏｒｔ ｅｍａｉｌ ｔｏ ｍｙ "
                         "ｂｏｓｓ ａｂｏｕｔ ｔａｋｉｎｇ Ｍｏｎｄａｙ ｏｆｆ．",
    "tibetan (0.58)": "ཁྱེད་ཀྱིས་ང་ལ་རོགས་པ་གནང་རོགས། ངའི་དཔོན་པོར་གློག་འཕྲིན་ཞིག་འབྲི་དགོས།",
    "burmese (0.58)": "ကျေးဇူးပြု၍ မိသားစုအကြောင်းကြောင့် လာမည့်တနင်္လာနေ့တွင် ခွင့်လိုကြောင်း "
                      "ကျွန်ုပ်၏သူဌေးထံ အီးမေးလ်ရေးရန် ကူညီပါ။",
    "georgian (0.58)": "გთხოვთ დამეხმაროთ ჩემს უფროსს ელფოსტის მიწერაში, რომ შემდეგ ორშაბათს "
                       "ოჯახური მიზეზების გამო შვებულება მჭირდება.",
    "persian digits (0.58)": " ".join(["۱۲۳۴۵۶۷۸۹۰"] * 10),
    "kannada (0.62)": "ದಯವಿಟ್ಟು ನನ್ನ ಬಾಸ್\u200cಗೆ ಇಮೇಲ್ ಬರೆಯಲು ಸಹಾಯ ಮಾಡಿ, ಮುಂದಿನ ಸೋಮವಾರ "
                      "ಕುಟುಂಬದ ಕಾರಣಗಳಿಂದ ನನಗೆ ರಜೆ ಬೇಕು.",
    "telugu (0.63)": "దయచేసి నా బాస్\u200cకు ఒక ఇమెయిల్ రాయడంలో నాకు సహాయం చేయండి, వచ్చే సోమవారం "
                     "కుటుంబ కారణాల వల్ల నాకు సెలవు కావాలి.",
    "gujarati (0.63)": "કૃપા કરીને મારા બોસને એક ઇમેઇલ લખવામાં મદદ કરો કે મને આવતા સોમવારે "
                       "કૌટુંબિક કારણોસર રજા જોઈએ છે.",
    "punjabi (0.63)": "ਕਿਰਪਾ ਕਰਕੇ ਮੇਰੇ ਬੌਸ ਨੂੰ ਈਮੇਲ ਲਿਖਣ ਵਿੱਚ ਮੇਰੀ ਮਦਦ ਕਰੋ ਕਿ ਮੈਨੂੰ ਅਗਲੇ ਸੋਮਵਾਰ "
                      "ਛੁੱਟੀ ਚਾਹੀਦੀ ਹੈ।",
    "malayalam (0.64)": "അടുത്ത തിങ്കളാഴ്ച കുടുംബ കാരണങ്ങളാൽ എനിക്ക് അവധി വേണമെന്ന് എന്റെ "
                        "ബോസിന് ഒരു ഇമെയിൽ എഴുതാൻ സഹായിക്കൂ.",
    "cantonese (0.68)": "唔該幫我寫封電郵俾老闆，話我下個禮拜一因為屋企有啲事要請假，多謝晒。"
                        "佢哋喺度嘅嘢唔係咁㗎。",
    "vietnamese decomposed (0.69)": unicodedata.normalize(
        "NFD", "Vui lòng giúp tôi viết email cho sếp rằng tôi cần nghỉ phép vào thứ Hai tới."),
    "khmer (0.71)": "សូមជួយខ្ញុំសរសេរអ៊ីមែលទៅចៅហ្វាយរបស់ខ្ញុំថាខ្ញុំត្រូវការឈប់សម្រាកនៅថ្ងៃច័ន្ទ"
                    "ក្រោយដោយសារហេតុផលគ្រួសារ។",
    "tamil (0.81)": "தயவுசெய்து என் முதலாளிக்கு ஒரு மின்னஞ்சல் எழுத உதவுங்கள், அடுத்த "
                    "திங்கட்கிழமை குடும்ப காரணங்களுக்காக எனக்கு விடுப்பு தேவை.",
    "bengali (0.84)": "অনুগ্রহ করে আমার বসকে একটি ইমেল লিখতে সাহায্য করুন যে পারিবারিক কারণে "
                      "আগামী সোমবার আমার ছুটি দরকার।",
    "vietnamese (0.87)": "Vui lòng giúp tôi viết email cho sếp rằng tôi cần nghỉ phép vào thứ Hai "
                         "tới vì lý do gia đình.",
    "french decomposed (0.88)": unicodedata.normalize(
        "NFD", "Pourriez-vous écrire à mon supérieur que je serai absent lundi prochain ? "
               "Merci beaucoup, à bientôt, déjà réglé."),
    "traditional chinese (0.90)": "請幫我寫一封郵件給我的老闆，說明我下週一因為家裡有事需要"
                                  "請假一天，並且保證會在週二之前完成所有的工作任務。",
    "yoruba (0.90)": "Jọ̀wọ́ ràn mí lọ́wọ́ láti kọ ímeèlì sí ọ̀gá mi pé mo nílò ìsinmi ní ọjọ́ Ajé "
                     "tó ń bọ̀.",
    "latin-1 signs (1.14)": "§¶©®°±µ·¿¡«»¬¤¦¨¯´¸" * 5,
    "box drawing (1.40)": "┌──────┬──────┐\n│ a    │ b    │\n├──────┼──────┤\n│ 1    │ 2    │"
                          "\n└──────┴──────┘\n" * 4,
    "numbers apart by no-break spaces (1.74)": "\u00a0".join(str(1000 + i) for i in range(60)),
}
# Widely written scripts, counted 0.88-1.45 at 1.2 a character: 1.02-1.47 now.
COMMON_SCRIPTS = {
    "persian": "لطفاً به من کمک کنید یک ایمیل به رئیسم بنویسم که دوشنبه آینده به دلایل خانوادگی "
               "به مرخصی نیاز دارم.",
    "urdu": "براہ کرم میرے باس کو ای میل لکھنے میں میری مدد کریں کہ مجھے اگلے پیر کو خاندانی "
            "وجوہات کی بنا پر چھٹی چاہیے۔",
    "hebrew": "אנא עזור לי לכתוב מייל לבוס שלי שאני צריך חופש ביום שני הבא בגלל סיבות משפחתיות.",
    "greek": "Παρακαλώ βοηθήστε με να γράψω ένα email στο αφεντικό μου ότι χρειάζομαι άδεια την "
             "επόμενη Δευτέρα.",
    "thai": "โปรดช่วยฉันเขียนอีเมลถึงเจ้านายว่าฉันต้องลาหยุดวันจันทร์หน้าเนื่องจากเหตุผลทางครอบครัว",
    "japanese kana": "きょうはとてもいいてんきですね。あしたもはれるといいですね。"
                     "カタカナのテキストもテストします。コンピューター、ソフトウェア、データベース。",
    "kazakh": "Сәлеметсіз бе, маған келесі дүйсенбіде отбасылық жағдайларға байланысты демалыс "
              "керек екенін бастығыма хат жазуға көмектесіңізші.",
    "german": "Könnten Sie bitte meinem Vorgesetzten eine E-Mail schreiben, dass ich nächsten "
              "Montag aus familiären Gründen frei brauche? Übrigens: Die Größe der Straße ist "
              "ungewöhnlich.",
    "french": "Pourriez-vous écrire à mon supérieur que je serai absent lundi prochain pour des "
              "raisons familiales ? Merci beaucoup, à bientôt, déjà réglé, très élevé.",
    "spanish": "¿Podrías ayudarme a escribir un correo a mi jefe diciendo que necesito el próximo "
               "lunes libre por razones familiares? Además, el niño está en la habitación.",
    "czech": "Můžete mi prosím pomoci napsat e-mail mému šéfovi, že příští pondělí potřebuji "
             "volno z rodinných důvodů? Děkuji, žluťoučký kůň úpěl ďábelské ódy.",
    "english typographic": "“It’s done,” she said — and it was… The café’s menu costs €12 • the "
                           "naïve résumé’s 3×4 grid at 20 °C – don’t worry; it’s fine.",
}
CYRILLIC = {
    "russian (2.35)": "Пожалуйста, помогите мне написать письмо начальнику, что мне нужен отгул в "
                      "следующий понедельник по семейным обстоятельствам.",
    "ukrainian (1.93)": "Будь ласка, допоможіть мені написати листа керівникові, що мені потрібен "
                        "вихідний наступного понеділка.",
    "serbian (1.94)": "Молим вас, помозите ми да напишем имејл шефу да ми треба слободан дан "
                      "следећег понедељка због породичних разлога.",
}
# Latin-script languages whose ASCII letters cl100k_base takes more of than English's (three
# characters a token where the ASCII rate counts four): 0.82-0.91 at 1.2 a character, 0.87-0.96
# now, the ASCII part short by a third.
OTHER_LATIN = {
    "hungarian": "Kérem, segítsen e-mailt írni a főnökömnek, hogy jövő hétfőn családi okok miatt "
                 "szabadságra van szükségem. Köszönöm, árvíztűrő tükörfúrógép.",
    "turkish": "Lütfen patronuma önümüzdeki pazartesi ailevi nedenlerle izin almam gerektiğini "
               "söyleyen bir e-posta yazmama yardım eder misiniz? Teşekkürler, görüşürüz.",
    "icelandic": "Gætirðu hjálpað mér að skrifa tölvupóst til yfirmanns míns um að ég þurfi frí "
                 "næsta mánudag vegna fjölskylduástæðna? Þakka þér fyrir.",
    "polish": "Czy możesz pomóc mi napisać e-mail do szefa, że potrzebuję wolnego w przyszły "
              "poniedziałek z powodów rodzinnych? Dziękuję, że się zgodził.",
}


def test_the_estimate_covers_cl100k_on_every_script() -> None:
    """Each script's sample is estimated at 0.95 of its cl100k_base count or more, where 1.2
    tokens a non-ASCII character counted 0.41-0.90 of it for most (the audit's figures beside
    the names), and at most 1.6 times it; widely written scripts at most 1.6 times too, and
    Cyrillic, whose real words cl100k_base merges most, no more than before (2.35 for Russian).
    Latin-script languages other than English stay a little under, for their ASCII part."""
    count = cl100k_counter()
    for bound, samples in ((1.6, SCRIPTS), (1.6, COMMON_SCRIPTS), (2.35, CYRILLIC)):
        for name, text in samples.items():
            actual = count(text)
            assert 0.95 * actual <= text_tokens(text) <= bound * actual, (
                name, actual, text_tokens(text))
    for name, text in OTHER_LATIN.items():
        actual = count(text)
        ascii_part = text.encode("ascii", "ignore").decode()
        assert 0.85 * actual <= text_tokens(text) <= actual, (name, actual, text_tokens(text))
        assert text_tokens(ascii_part) < 0.75 * count(ascii_part), name


def test_a_georgian_prompt_past_a_context_window_is_counted_past_it() -> None:
    """The audit's case: a Georgian prompt of over 4,000 cl100k_base tokens was estimated at
    about 2,400 (1.2 a letter) and passed the fit check of a 4,000-token context window."""
    text = SCRIPTS["georgian (0.58)"] * 20
    actual = cl100k_counter()(text)
    assert actual > 4000
    assert estimate_prompt_tokens(RequestView(messages=(("user", text),))) >= actual


def test_emoji_and_symbols_count_what_cl100k_takes_for_them() -> None:
    """An emoji is two or three tokens in cl100k_base, and so are most of the Basic
    Multilingual Plane's emoji symbols, arrows and operators (` ≤` is one token, `≤` alone
    two); the joiners and variation selectors of an emoji sequence one or two; box-drawing
    lines, `→` and the minus sign one or less (runs of `─` merge, four a token)."""
    for char in "😀🎉🇮⚠⏰⇒≤✅✨":
        assert 1.7 <= _weight(char) <= 3.5, char
    for char in "\u200d\ufe0f\u20e3":
        assert 1.0 <= _weight(char) <= 5.0, ascii(char)
    for char in "─│→\u2212":
        assert _weight(char) <= 1.25, char
    assert text_tokens("ok 😀") == pytest.approx(3 / 4 + _weight("😀"))
    assert text_tokens("😀 ⚠\ufe0f") == pytest.approx(1 / 4 + sum(map(_weight, "😀⚠\ufe0f")))


def _estimate_before_emoji(text: str) -> float:
    """The estimate before emoji were priced: 1.2 tokens for every non-ASCII character."""
    ascii_chars = len(text.encode("ascii", "ignore"))
    return ascii_chars / 4 + (len(text) - ascii_chars) * 1.2


def test_the_estimate_covers_cl100k_on_emoji_heavy_text() -> None:
    """Each emoji-heavy text's estimate is at least its cl100k_base count, and not more than
    1.6 times it. 1.2 tokens a character counted 206 of their 335 tokens (15 of `party`'s 20;
    only the Persian one was covered, by its letters' margin)."""
    count = cl100k_counter()
    old = actual_total = 0.0
    for name, text in EMOJI.items():
        actual = count(text)
        assert actual <= text_tokens(text) <= 1.6 * actual, (name, actual, text_tokens(text))
        old += _estimate_before_emoji(text)
        actual_total += actual
    assert old < 0.7 * actual_total  # what the estimate missed before


# Texts of the Basic Multilingual Plane's symbols, as a model's answers write them and they come
# back as history, and of math prompts' operators: 2-3 cl100k_base tokens each (⚠️ 4, a keycap
# 5), counted 1.2 before.
BMP_SYMBOL_TEXTS = {
    "check list": "- ✅ tests pass\n- ✅ lint passes\n- ❌ docs missing\n- ⚠️ slow on CI",
    "keycaps": "1️⃣ Install 2️⃣ Configure 3️⃣ Run",
    "ratings": "⭐⭐⭐⭐☆ great ✨ would buy again ☀️",
    "alarms": "⏰ wake up ⌛ wait ☕ coffee ⛔ stop",
    "persian check list": "✅ انجام شد\n❌ مانده\n⚠️ بررسی شود",
    "only symbols": "✅❌⚠️✨⭐☀️❤️✔✖➡️",
    "roots": "Show that √2 ∉ ℚ and that ∀n ∈ ℕ, n² ≥ n",
    "logic": "If p ⇒ q and q ⇒ r then p ⇒ r, so ¬r ⇒ ¬p",
    "sets": "A ∩ B ⊆ A ∪ B and x ∈ A ∖ B ⇔ x ∉ B",
    "formula": "For all x ∈ ℝ, if x ≤ 3 then ∑ᵢ xᵢ ≥ 0 and ∫ f(x) dx ≠ ∞",
}


def test_the_estimate_covers_cl100k_on_basic_plane_symbols() -> None:
    """Each symbol-heavy text without an emoji beyond U+FFFF is estimated at 0.95 of its
    cl100k_base count or more (1.03-1.31, but `sets`, 0.97: its one-letter variables are a
    token each in cl100k_base and a quarter at the ASCII rate) and at most 1.9 times it; at 1.2
    tokens a symbol the estimate covered only the Persian check list, by its letters' margin.
    Trees and tables of box-drawing lines, whose runs cl100k_base merges, are not counted a
    token or more a character (1.01 and 1.02)."""
    count = cl100k_counter()
    undercounted_before = 0
    for name, text in BMP_SYMBOL_TEXTS.items():
        assert max(text) <= "\uffff", name
        actual = count(text)
        assert 0.95 * actual <= text_tokens(text) <= 1.9 * actual, (name, actual,
                                                                    text_tokens(text))
        undercounted_before += _estimate_before_emoji(text) < actual
    assert undercounted_before == len(BMP_SYMBOL_TEXTS) - 1
    tree = "src/\n├── main.py\n├── utils/\n│   ├── io.py\n│   └── text.py\n└── README.md\n"
    table = "┌────┬────┐\n│ a  │ b  │\n├────┼────┤\n│ 1  │ 2  │\n└────┴────┘"
    for text in (tree, table):
        assert count(text) <= text_tokens(text) <= 1.25 * count(text), text


def _by_character(text: str) -> float:
    """The estimate read character by character: what `text_tokens` computes faster."""
    ascii_text = "".join(c for c in text if c.isascii())
    ascii_chars = len(ascii_text)
    words = sum(c.isalpha() or c == " " for c in ascii_text)
    digits = sum(c.isdigit() for c in ascii_text)
    capitals = sum(c.isupper() for c in ascii_text)
    case_changes = sum(a.islower() and b.isupper() for a, b in pairwise(ascii_text))
    return (words / 4 + digits * 1.0 + (ascii_chars - words - digits) * 0.55
            + (case_changes * 2.5 if capitals * 8 > ascii_chars else 0.0)
            + sum(_weight(c) for c in text if not c.isascii()))


@given(st.text())
def test_the_estimate_is_the_character_by_character_count(text: str) -> None:
    """Whatever the text, the fast path (the weights of its UTF-16 code units, packed with
    the ASCII counts and summed at once) counts what reading it character by character does."""
    assert text_tokens(text) == pytest.approx(_by_character(text))


def test_a_long_text_counts_as_its_parts_do() -> None:
    """Past the 262,143 code units whose packed counts one sum holds, a text is summed in parts:
    nothing overflows into the next count."""
    part = "ب" * 100_000 + "aB" * 50_000 + "😀" * 1000
    assert text_tokens(part * 5) == pytest.approx(5 * text_tokens(part))
    assert text_tokens(part * 5) == pytest.approx(_by_character(part * 5))


@given(st.text())
def test_utf8_bytes_count_as_their_text_does(text: str) -> None:
    """Serialised JSON is estimated from its bytes without decoding ASCII: whatever the text, its
    UTF-8 bytes count what the text counts."""
    assert utf8_tokens(text.encode()) == pytest.approx(text_tokens(text))


def _shared_prompts(lang: str) -> list[str]:
    if not SHARED_PROMPTS.exists():
        pytest.skip("the shared prompt data is not on this machine")
    files = ["test.jsonl", "multilingual_workload.jsonl"]
    rows = [json.loads(line) for name in files
            for line in (SHARED_PROMPTS / name).read_text(encoding="utf-8").splitlines()]
    return [r["text"] for r in rows if r["lang"] == lang and len(r["text"]) >= 20]


@pytest.mark.parametrize(("lang", "covered", "most"), [("en", 0.85, 1.25), ("fa", 0.98, 1.5)])
def test_the_estimate_errs_high_on_the_projects_prompts(
        lang: str, covered: float, most: float) -> None:
    """Over the shared English and Persian prompts the estimate is at least cl100k_base's count
    in total, and at most `most` times it; one by one it covers `covered` of the prompts
    (English: 91%, 88% with every ASCII sign and digit at 0.6 tokens, 74% at four characters a
    token whatever they were; the rest short ones the per-message 4 tokens cover; Persian all,
    99.9% at 1.2 tokens a non-ASCII character). In total, English 1.21 (1.12 at four characters
    a token), Persian 1.32 (1.35 at 1.2 a character)."""
    count = cl100k_counter()
    texts = _shared_prompts(lang)
    actual = [count(t) for t in texts]
    estimated = [text_tokens(t) for t in texts]
    share_covered = sum(e >= a for e, a in zip(estimated, actual, strict=True)) / len(texts)
    assert sum(actual) <= sum(estimated) <= most * sum(actual)
    assert share_covered >= covered, share_covered


def _repo_texts(kind: str) -> list[str]:
    """The project's own code and data of one kind, ASCII files of 300 characters or more:
    its router modules, and its YAML and JSON files (JSON serialised compact, as a request's
    tool schemas and tool call arguments are); not what lies in hidden folders (virtual
    environments) or `bench/out`."""
    folders, suffix = ((("router",), ".py") if kind == "python" else
                       (("policies", "bench", "evals", "router"), f".{kind}"))
    paths = [p for d in folders for p in sorted((REPO / d).rglob(f"*{suffix}"))
             if not any(part.startswith(".") or part == "out"
                        for part in p.relative_to(REPO).parts)]
    texts = [p.read_text() for p in paths]
    if kind == "json":
        texts = [orjson.dumps(json.loads(t)).decode() for t in texts]
    return [t for t in texts if t.isascii() and len(t) >= 300]


@pytest.mark.parametrize(("kind", "least", "files"), [
    ("python", 1.0, 100), ("yaml", 0.9, 10), ("json", 0.9, 8)])
def test_the_estimate_covers_cl100k_on_code_and_json(kind: str, least: float, files: int) -> None:
    """Code, YAML and compact JSON (a tool's schema is often most of an agent's prompt) are
    dense in digits and punctuation: four characters a token, whatever they were, put the
    project's own compact JSON at 0.57-0.87 of cl100k_base's count (0.72 in total), its YAML at
    0.76-0.93 and its Python modules at 0.79-1.24. Counting a digit one token and every other
    such character 0.55, every file is at least `least` of the count and at most 1.6 times it
    (measured: Python 1.04-1.44, YAML 0.92-1.11, JSON 1.03-1.48), and each kind is covered in
    total (1.23, 1.05, 1.27)."""
    count = cl100k_counter()
    texts = _repo_texts(kind)
    assert len(texts) >= files
    ratios = [text_tokens(t) / count(t) for t in texts]
    assert all(least <= r <= 1.6 for r in ratios), sorted(ratios)[:3] + sorted(ratios)[-3:]
    assert sum(map(text_tokens, texts)) >= sum(map(count, texts))
