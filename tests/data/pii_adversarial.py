# ruff: noqa: RUF001, E501  (test data in many scripts; the IBAN table is one country per cell)
"""Adversarial PII test data: values of each kind in many scripts, countries and surroundings,
each with the exact span that must become a placeholder, and look-alikes that must stay as written.

A positive case is `(kind, value, template)`: the text is `template.format(value)` and the only
correct redaction is `template.format(placeholder)` (exact span: nothing more, nothing less).
IBANs are built from a country's BBAN here with their ISO 7064 check digits, so every one is
valid; the test checks them again independently.
"""

from __future__ import annotations

# Surroundings in many scripts, including scripts written without spaces (CJK, Thai), where a
# value touches the words around it, and full-width punctuation.
CONTEXTS = [
    "{}",
    "Contact: {}.",
    "Write to {}, then wait.",
    "({})",
    "Kontakt: {} bitte.",
    "Écrivez à {} !",
    "Напишите на {}.",
    "Επικοινωνία: {}.",
    "联系方式：{}，谢谢",
    "服务器地址是{}，端口80",
    "連絡先は{}です。",
    "ติดต่อ {} ได้เลย",
    "للتواصل: {} شكرا",
    "संपर्क: {} धन्यवाद",
    "연락처: {} 입니다",
    "Line 1\n{}\nLine 3",
    "<td>{}</td>",
    '"{}"',
    "«{}»",
    "- {};",
]

EMAILS = [
    "john.doe@example.com",
    "o'brien@example.ie",
    "d'angelo@posta.example.it",
    "jane+news@example.org",
    "first_last@sub.example.co.uk",
    "müller@beispiel.de",
    "иван.петров@пример.рф",
    "γιώργος@παράδειγμα.ελ",
    "مستخدم@مثال.موقع",
    "info@مثال.شبكة",
    "उपयोगकर्ता@उदाहरण.भारत",
    "संपर्क@डाटामेल.भारत",
    "ユーザー@例え.テスト",
    "山田太郎@例え.jp",
    "用户@例子.公司",
    "info@日本語.jp",
    "ผู้ใช้@ตัวอย่าง.ไทย",
    "사용자@예시.한국",
    "nguyễn.văn@ví-dụ.vn",
    "user@xn--80ak6aa92e.com",
    "x@example.xn--p1ai",
    "Sales.Team@Example.COM",
    "support@shop.example.travel",
    "a.b-c@mail.example.io",
    "0791234567@sms.example.ch",
    "ş.yılmaz@örnek.com.tr",
    "שלום@דוגמה.ישראל",
]

IPV4 = [
    "8.8.8.8",
    "203.0.114.9",
    "192.168.0.1",
    "10.0.0.254",
    "172.16.254.1",
    "255.255.255.255",
    "1.1.1.1",
    "198.51.100.23",
    "100.64.0.1",
]

IPV6 = [
    "2001:db8::1",
    "2a02:1810:4d02:e400::1",
    "fe80::1ff:fe23:4567:890a",
    "2001:0db8:85a3:0000:0000:8a2e:0370:7334",
    "::1",
    "::ffff:192.0.2.1",
    "64:ff9b::198.51.100.7",
    "fe80::1%eth0",
    "2606:4700:4700::1111",
    "2a00:1450:4001:82b::200e",
    "fd12:3456:789a:1::1",
]

# Contexts only IPv6 literals are written in (RFC 5321 address literals, URLs).
IPV6_EXTRA = [
    ("2a02:1810:4d02:e400::1", "user@[IPv6:{}]"),
    ("2001:db8::42", "Received: from mx ([IPv6:{}])"),
    ("2001:db8::1", "http://[{}]:8080/"),
    ("fe80::1", "inet6 addr:{}/64"),
]

# Country, BBAN (the national part; check digits are computed).
_BBANS = [
    ("DE", "370400440532013000"), ("CH", "00762011623852957"), ("AT", "1904300234573201"),
    ("FR", "20041010050500013M02606"), ("GB", "WEST12345698765432"), ("NL", "ABNA0417164300"),
    ("BE", "539007547034"), ("ES", "21000418450200051332"), ("IT", "X0542811101000000123456"),
    ("PT", "000201231234567890154"), ("PL", "109010140000071219812874"), ("SE", "50000000058398257466"),
    ("NO", "86011117947"), ("DK", "00400440116243"), ("FI", "12345600000785"),
    ("IE", "AIBK93115212345678"), ("LU", "0019400644750000"), ("CZ", "08000000192000145399"),
    ("SK", "12000000198742637541"), ("HU", "117730161111101800000000"), ("RO", "AAAA1B31007593840000"),
    ("BG", "BNBG96611020345678"), ("HR", "10010051863000160"), ("SI", "263300012039086"),
    ("GR", "01101250000000012300695"), ("CY", "002001280000001200527600"), ("MT", "MALT011000012345MTLCAST001S"),
    ("EE", "2200221020145685"), ("LV", "BANK0000435195001"), ("LT", "1000011101001000"),
    ("IS", "0159260076545510730339"), ("LI", "088100002324013AA"), ("MC", "11222000010123456789030"),
    ("SM", "U0322509800000000270100"), ("TR", "0006100519786457841326"), ("SA", "80000000608010167519"),
    ("AE", "0331234567890123456"), ("IL", "0108000000099999999"), ("BR", "00360305000010009795493C1"),
    ("UA", "3223130000026007233566001"), ("KZ", "125KZT5004100100"), ("GE", "NB0000000101904917"),
    ("RS", "260005601001611379"), ("BA", "1290079401028494"), ("AL", "202111090000000001234567"),
    ("MK", "250120000058984"), ("ME", "505000012345678951"), ("MD", "AG000225100013104168"),
    ("AD", "00012030200359100100"), ("JO", "CBJO0010000000000131000302"), ("QA", "DOHB00001234567890ABCDEFG"),
    ("PK", "SCBL0000001123456702"), ("EG", "0019000500000000263180002"), ("TN", "10006035183598478831"),
]  # fmt: skip


def iban_check_digits(country: str, bban: str) -> str:
    rearranged = bban + country + "00"
    number = int("".join(str(int(c, 36)) for c in rearranged))
    return f"{98 - number % 97:02d}"


def _grouped(iban: str, sep: str) -> str:
    return sep.join(iban[i : i + 4] for i in range(0, len(iban), 4))


def _ibans() -> list[str]:
    out = []
    seps = [None, " ", "\u00a0", "-", "\u202f", " "]
    for i, (country, bban) in enumerate(_BBANS):
        iban = country + iban_check_digits(country, bban) + bban
        sep = seps[i % len(seps)]
        out.append(iban if sep is None else _grouped(iban, sep))
    # A few in every separator, whatever the country.
    for country, bban in _BBANS[:4]:
        iban = country + iban_check_digits(country, bban) + bban
        out += [iban, _grouped(iban, " "), _grouped(iban, "\u00a0"), _grouped(iban, "-")]
    return out


IBANS = _ibans()

PHONES = [
    # North America
    "(212) 555-0199",
    "212.555.0199x123",
    "212-555-0199 ext. 42",
    "212 555 0199",
    "1-800-555-0199",
    "+1 (415) 555-2671",
    "+1 415 555 2671",
    "+1-416-555-0123",
    # Europe
    "+44(0)20 7946 0958",
    "+44 (0)20 7946 0958",
    "+44 7700 900123",
    "020 7946 0958",
    "07700 900123",
    "+41 44 668 18 00",
    "044 668 18 00",
    "+49 30 12345678",
    "+49 (0)30 1234-5678",
    "030 12345678",
    "0171 1234567",
    "+33 6 12 34 56 78",
    "06 12 34 56 78",
    "01.23.45.67.89",
    "+34 612 345 678",
    "+39 06 1234 5678",
    "+39 312 345 6789",
    "+31 20 123 4567",
    "+32 2 123 45 67",
    "+46 8 123 456 78",
    "+47 22 33 44 55",
    "+45 32 12 34 56",
    "+358 9 1234 5678",
    "+48 22 123 45 67",
    "+420 601 123 456",
    "+36 1 234 5678",
    "+30 210 123 4567",
    "+7 495 123-45-67",
    "8 (495) 123-45-67",
    "+380 44 123 4567",
    "+90 212 123 45 67",
    "+351 21 123 4567",
    # Asia, Oceania, Africa, Latin America
    "+86 10 1234 5678",
    "+86 138 0013 8000",
    "010-1234-5678",
    "+81 3-1234-5678",
    "03-1234-5678",
    "090-1234-5678",
    "+82 2-123-4567",
    "02-123-4567",
    "+91 98765 43210",
    "+91-11-2345-6789",
    "+971 4 123 4567",
    "+966 11 234 5678",
    "+972 3-123-4567",
    "+20 2 1234 5678",
    "+27 21 123 4567",
    "+234 803 123 4567",
    "+254 712 345678",
    "+61 2 9876 5432",
    "(02) 9876 5432",
    "+64 9 123 4567",
    "+55 11 91234-5678",
    "(11) 91234-5678",
    "+52 55 1234 5678",
    "+54 11 4123-4567",
    "+66 2 123 4567",
    "+84 24 3123 4567",
    "+62 21 1234 5678",
    "+63 2 8123 4567",
    "+65 6123 4567",
    "+852 2123 4567",
]

# National numbers written without their trunk 0 or with no distinctive prefix are only phone
# numbers when the text says so.
PHONES_WITH_KEYWORD = [
    ("612 345 678", "Teléfono: {}"),
    ("44 668 18 00", "Tel. {}"),
    ("32 12 34 56", "Telefon: {}"),
    ("22 33 44 55", "tlf. {}"),
    ("138 0013 8000", "电话：{}"),
    ("912 345 678", "Telemóvel {}"),
    ("512 345 678", "tel. kom. {}"),
    ("98765 43210", "Mobile: {}"),
    ("415 555 2671", "Call {} today"),
    ("2123 4567", "Phone: {}"),
]

# Look-alikes: technical and numeric text that must not change at all.
LOOKALIKES = [
    # slices and proportions
    "a[1::2]",
    "xs[::2]",
    "x[2::3]",
    "arr[10::5]",
    "m[1:3, ::2]",
    "2:3::4:6",
    "1:2::3:4",
    "ratio 1:4::2:8",
    "Genesis 1:1 and John 3:16",
    "12:30:45",
    "00:00:00.000",
    # code that looks like an email
    "this@MainActivity.startActivity(intent)",
    "return inputs@model.weight",
    "y = x@W.T + b",
    "out = q@k.transpose(-2, -1)",
    "see report@v2.pdf",
    "img/logo@2x.png",
    "icon@3x.webp",
    "npm i left-pad@1.3.0",
    "pip install pkg@git.repo",
    "user@localhost",
    "root@server:~$ ls",
    "follow @john.doe",
    "@Override public void run()",
    "data@self.params",
    "x@y.zzz",
    "result = a@b.c",
    "docker pull ubuntu@sha256:45b23dee08af",
    # versions and dotted numbers
    "Windows 10.0.19041.1",
    "v1.2.3.4",
    "version 1.2.3.4",
    "1.2.3.4.5",
    "OID 1.3.6.1.4.1.311",
    "256.1.1.1",
    "192.168.001.001",
    # IPv6 look-alikes
    "std::vector<int>",
    "u8::MAX",
    "dead::beef",
    "f :: Int -> Int",
    "00:1A:2B:3C:4D:5E",
    "08:00:27:12:34:56",
    "a::b::c",
    # IBAN look-alikes
    "DE89370400440532013001",
    "GB82 WEST 1234 5698 7654 33",
    "SKU AB12 CD34 EF56 GH78",
    "BIC COBADEFFXXX",
    "XX12ABCDEF1234567890",
    # phone look-alikes: postal codes, serials, MACs, signed and grouped numbers
    "Washington, DC 20500-0003",
    "Beverly Hills, CA 90210-1234",
    "Boston, MA 02139-4307",
    "ISSN 0317-8471",
    "ISSN 2049-3630",
    "eISSN 1476-4687",
    "08-00-27-12-34-56",
    "MAC 00-1A-2B-3C-4D-5E",
    "+12 345 678 €",
    "+1 234 567 USD",
    "+15 000 km²",
    "-12 345 678 €",
    "+3 120 000 people",
    "1 234 567 890",
    "population 12 345 678",
    "2024-03-15",
    "15.03.2024",
    "03/15/2024",
    "2024-03-15 12:30",
    "978-3-16-148410-0",
    "ISBN 0-306-40615-2",
    "ISBN-10: 0306406152",
    "1'234.50 CHF",
    "USD 1,299.00",
    "von 08:00 bis 17:30",
    "09.00-17.00",
    "Order no. 0123456789",
    "123e4567-e89b-12d3-a456-426614174000",
    "47.3769° N, 8.5417° E",
    "doi:10.1000/182",
    "1990-2000",
    "pages 0123-0456",
    "3.14159 26535 89793",
    "chmod 0755 file",
    "0x7fff5fbff8c8",
    "Σ = 0.05 ± 0.01",
    "Tel Aviv 2019-2023",
]

# Cases written after the patterns, as a held-out check of how they generalize; kept here so
# they stay covered. `(kind, value, template)` as above.
HELD_OUT = [
    ("email", "kontakt@firma-beispiel.at", "Mail: {}"),
    ("email", "mary.o'neil@example.co.uk", "Email {} now"),
    ("email", "вопрос@сайт.рус", "Пишите: {}"),
    ("email", "info@bücher.de", "{}"),
    ("email", "admin@مثال.السعودية", "البريد {}"),
    ("email", "डाक@उदाहरण.भारत", "ईमेल: {} पर"),
    ("email", "support@example.中国", "请发邮件到 {} 谢谢"),
    ("email", "user.name+tag@gmail.com", "<{}>"),
    ("email", "ali.veli@şirket.com.tr", "E-posta: {}."),
    ("email", "test@例え.jp", "メール：{}"),
    ("email", "x_y-z@sub.domain.org", "'{}'"),
    ("ipv4", "203.0.113.254", "服务器{}上"),
    ("ipv4", "198.51.100.1", "IP：{}。"),
    ("ipv4", "10.1.2.3", "host={}"),
    ("ipv4", "8.8.4.4", "DNS {}/24"),
    ("ipv6", "2001:db8:0:1::abcd", "addr {}"),
    ("ipv6", "2a01:4f8:c2c:123f::1", "IPv6：{}，"),
    ("ipv6", "2001:db8::5", "[IPv6:{}]"),
    ("ipv6", "fe80::a00:27ff:fe4e:66a1", "link {}"),
    ("ipv6", "2001:db8::", "net {}/32"),
    ("iban", "FR76-3000-6000-0112-3456-7890-189", "IBAN {}"),
    ("iban", "GB29\u00a0NWBK\u00a06016\u00a01331\u00a09268\u00a019", "{}"),
    ("iban", "NL02ABNA0123456789", "IBAN：{}"),
    ("iban", "BE71 0961 2345 6769", "{})"),
    ("phone", "(415) 555-0132", "Call {} now"),
    ("phone", "415.555.0132 x55", "{}"),
    ("phone", "+44 (0) 161 496 0000", "T: {}"),
    ("phone", "+33 (0)1 23 45 67 89", "Tél : {}"),
    ("phone", "0049 89 1234567", "{}"),
    ("phone", "+81-90-1234-5678", "携帯：{}"),
    ("phone", "+86-21-6123-4567", "电话{}"),
    ("phone", "0212 123 45 67", "Tel: {}"),
    ("phone", "+7 (812) 123-45-67", "тел. {}"),
    ("phone", "612 34 56 78", "Tel.: {}"),
    ("phone", "+353 1 234 5678", "ph {}"),
    ("phone", "1 (800) 555-0100", "{}"),
    ("phone", "+61 412 345 678", "Mob: {}"),
    ("phone", "555-0100", "Phone: {}"),
    ("phone", "(0)30 12345678", "Tel {}"),  # missed: a bare "(0)" without a country code
]

LOOKALIKES += [
    "a[3::4]",
    "b[::3]",
    "a[100::200]",
    "5:10::15:30",
    "x = m@n.grad",
    "self@Foo.bar()",
    "photo@2x.jpeg",
    "cover@final.docx",
    "ZIP 10001-2345",
    "ISSN 1234-5679",
    "MAC 0A-1B-2C-3D-4E-5F",
    "+25 000 000 $",
    "+1 999 999 km",
    "+7 000 000 000 euros",
    "1 500 000 €",
    "Tel Aviv 2020-2024",
    "call 1990-1995",
    "ISBN 978-0-306-40615-7",
    "12:30-13:45",
    "3:2::6:4",
    "2001-2010",
    "SKU 0123-4567",
    "error 0x80070005",
    "Ref 20231215-0001",
    "1.5::2.5",
]
