"""Recall@5 of the documents search on questions whose answer sits in one passage of one file.

    python tools/retrieval_documents.py                  # 210 questions, 3,000 other files
    python tools/retrieval_documents.py --others 20000

Ten kinds of fact people look up in their papers (when a lease ends, what the plumber charged,
what the insurer covers, a tax number, when a warranty ends, a doctor's appointment, what a
school trip costs, a flight's booking code, a bank account, a car's service) in seven languages
(en, de, fr, es, ru, zh, ja), three of each with other names and values: 210 fact documents
(PDF, docx, odt, eml, html, md, txt in turn) among ``--others`` documents written by
tools/bench_documents.py, whose everyday words are the same ("lease", "invoice", "insurance"...
in each language). Each question is asked as a person would type it, in other words than the
document's where a person would use other words ("when does my lease end?" against "the
tenancy ... terminates"); a question is recalled when the fact's file is among the first five
passages of ``DocumentIndex.search`` (what search_documents returns). Prints recall@5 overall,
per language and per kind of fact, and the misses.
"""

# ruff: noqa: RUF001, E501 (a table of sentences in their languages, with their own punctuation)

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tools"))

from bench_documents import write_corpus  # noqa: E402

from botpsy_desktop.adapters.documents.index import DocumentIndex  # noqa: E402
from tests.helpers.documents import write_docx, write_eml, write_odt, write_pdf  # noqa: E402

NAMES = ("Moreau", "Schmidt", "Kowalski")
VALUES = ("4471", "8093", "2265")

# kind -> language -> (the document's sentence, the question); {n} a name, {v} a number
FACTS: dict[str, dict[str, tuple[str, str]]] = {
    "lease": {
        "en": ("The tenancy agreement with landlord {n} terminates on 31 March 20{v}.",
               "when does my lease with {n} end?"),
        "de": ("Der Mietvertrag mit Vermieter {n} endet am 31. März 20{v}.",
               "wann endet mein Mietvertrag mit {n}?"),
        "fr": ("Le bail signé avec le propriétaire {n} prend fin le 31 mars 20{v}.",
               "quand se termine mon bail avec {n} ?"),
        "es": ("El contrato de alquiler con el propietario {n} termina el 31 de marzo de 20{v}.",
               "¿cuándo termina mi contrato de alquiler con {n}?"),
        "ru": ("Договор аренды с владельцем {n} заканчивается 31 марта 20{v} года.",
               "когда заканчивается договор аренды с {n}?"),
        "zh": ("与房东{n}签订的租约于20{v}年3月31日到期。", "我和{n}的租约什么时候到期？"),
        "ja": ("大家{n}との賃貸契約は20{v}年3月31日に終了します。", "{n}との賃貸契約はいつ終了しますか？"),
    },
    "plumber": {
        "en": ("Invoice {v} from {n} Plumbing: repair of the kitchen sink, 240 EUR.",
               "how much did the plumber {n} charge?"),
        "de": ("Rechnung {v} von Installateur {n}: Reparatur der Spüle, 240 EUR.",
               "was hat der Klempner {n} berechnet?"),
        "fr": ("Facture {v} du plombier {n} : réparation de l'évier, 240 EUR.",
               "combien le plombier {n} a facturé ?"),
        "es": ("Factura {v} del fontanero {n}: reparación del fregadero, 240 EUR.",
               "¿cuánto cobró el fontanero {n}?"),
        "ru": ("Счёт {v} от сантехника {n}: ремонт раковины, 240 EUR.",
               "сколько взял сантехник {n}?"),
        "zh": ("水管工{n}的发票{v}：修理厨房水槽，240欧元。", "水管工{n}的发票是多少钱？"),
        "ja": ("配管工{n}の請求書{v}：台所の流し台の修理、240ユーロ。", "配管工{n}の請求書はいくら？"),
    },
    "insurance": {
        "en": ("Claim {v}: {n} Insurance covers the windscreen repair in full, no excess.",
               "what did {n} insurance say about the windscreen?"),
        "de": ("Schaden {v}: Die {n} Versicherung übernimmt die Reparatur der Windschutzscheibe.",
               "was sagt die {n} Versicherung zur Windschutzscheibe?"),
        "fr": ("Sinistre {v} : l'assurance {n} prend en charge le pare-brise en totalité.",
               "qu'a dit l'assurance {n} pour le pare-brise ?"),
        "es": ("Siniestro {v}: el seguro {n} cubre la reparación del parabrisas por completo.",
               "¿qué dijo el seguro {n} del parabrisas?"),
        "ru": ("Страховой случай {v}: страховая {n} полностью оплачивает ремонт лобового стекла.",
               "что страховая {n} сказала про лобовое стекло?"),
        "zh": ("理赔{v}：{n}保险公司全额承担挡风玻璃的维修。", "{n}保险公司对挡风玻璃怎么说？"),
        "ja": ("事故{v}：{n}保険はフロントガラスの修理を全額補償します。", "{n}保険はフロントガラスについて何と言っていますか？"),
    },
    "tax": {
        "en": ("Tax office letter for {n}: your tax identification number is 12 {v} 998.",
               "what is {n}'s tax number?"),
        "de": ("Schreiben des Finanzamts an {n}: Ihre Steuernummer lautet 12 {v} 998.",
               "wie lautet die Steuernummer von {n}?"),
        "fr": ("Courrier des impôts pour {n} : votre numéro fiscal est 12 {v} 998.",
               "quel est le numéro fiscal de {n} ?"),
        "es": ("Carta de Hacienda para {n}: su número de identificación fiscal es 12 {v} 998.",
               "¿cuál es el número fiscal de {n}?"),
        "ru": ("Письмо из налоговой для {n}: ваш налоговый номер 12 {v} 998.",
               "какой налоговый номер у {n}?"),
        "zh": ("税务局致{n}的信：您的税号是12 {v} 998。", "{n}的税号是多少？"),
        "ja": ("税務署から{n}への通知：あなたの税番号は12 {v} 998です。", "{n}の税番号は？"),
    },
    "warranty": {
        "en": ("Warranty card: the {n} washing machine is guaranteed until June 20{v}.",
               "until when is the {n} washing machine under warranty?"),
        "de": ("Garantiekarte: Die Waschmaschine von {n} hat Garantie bis Juni 20{v}.",
               "wie lange hat die {n} Waschmaschine Garantie?"),
        "fr": ("Carte de garantie : le lave-linge {n} est garanti jusqu'en juin 20{v}.",
               "jusqu'à quand le lave-linge {n} est-il garanti ?"),
        "es": ("Tarjeta de garantía: la lavadora {n} tiene garantía hasta junio de 20{v}.",
               "¿hasta cuándo tiene garantía la lavadora {n}?"),
        "ru": ("Гарантийный талон: стиральная машина {n} на гарантии до июня 20{v} года.",
               "до какого числа гарантия на стиральную машину {n}?"),
        "zh": ("保修卡：{n}洗衣机保修至20{v}年6月。", "{n}洗衣机的保修到什么时候？"),
        "ja": ("保証書：{n}の洗濯機は20{v}年6月まで保証されます。", "{n}の洗濯機の保証はいつまで？"),
    },
    "doctor": {
        "en": ("Appointment with Dr {n} on Tuesday 14 May at 9:{v2}, room {v}.",
               "when is my appointment with Dr {n}?"),
        "de": ("Termin bei Dr. {n} am Dienstag, 14. Mai, um 9:{v2} Uhr, Raum {v}.",
               "wann habe ich den Termin bei Dr. {n}?"),
        "fr": ("Rendez-vous chez le Dr {n} le mardi 14 mai à 9h{v2}, salle {v}.",
               "c'est quand mon rendez-vous chez le Dr {n} ?"),
        "es": ("Cita con el Dr. {n} el martes 14 de mayo a las 9:{v2}, sala {v}.",
               "¿cuándo es mi cita con el Dr. {n}?"),
        "ru": ("Приём у доктора {n} во вторник 14 мая в 9:{v2}, кабинет {v}.",
               "когда у меня приём у доктора {n}?"),
        "zh": ("{n}医生的预约：5月14日星期二9:{v2}，{v}号诊室。", "我和{n}医生的预约是什么时候？"),
        "ja": ("{n}医師の予約：5月14日火曜日9時{v2}分、{v}号室。", "{n}先生の予約はいつ？"),
    },
    "school": {
        "en": ("School trip to the aquarium with Mrs {n}: it costs {v2} euros, bring a lunch.",
               "how much is the school trip with Mrs {n}?"),
        "de": ("Schulausflug ins Aquarium mit Frau {n}: Er kostet {v2} Euro, bitte Essen mitgeben.",
               "was kostet der Ausflug mit Frau {n}?"),
        "fr": ("Sortie scolaire à l'aquarium avec Mme {n} : elle coûte {v2} euros.",
               "combien coûte la sortie avec Mme {n} ?"),
        "es": ("Excursión escolar al acuario con la señora {n}: cuesta {v2} euros.",
               "¿cuánto cuesta la excursión con la señora {n}?"),
        "ru": ("Школьная экскурсия в аквариум с учительницей {n}: стоимость {v2} евро.",
               "сколько стоит экскурсия с учительницей {n}?"),
        "zh": ("和{n}老师去水族馆的学校旅行：费用{v2}欧元。", "和{n}老师的学校旅行要多少钱？"),
        "ja": ("{n}先生との水族館への遠足：費用は{v2}ユーロです。", "{n}先生との遠足はいくら？"),
    },
    "flight": {
        "en": ("Booking confirmation for {n}: flight to Lisbon, booking code QX{v}.",
               "what's the booking code of {n}'s flight to Lisbon?"),
        "de": ("Buchungsbestätigung für {n}: Flug nach Lissabon, Buchungscode QX{v}.",
               "welchen Buchungscode hat der Flug von {n} nach Lissabon?"),
        "fr": ("Confirmation de réservation pour {n} : vol pour Lisbonne, code QX{v}.",
               "quel est le code de réservation du vol de {n} pour Lisbonne ?"),
        "es": ("Confirmación de reserva para {n}: vuelo a Lisboa, código QX{v}.",
               "¿cuál es el código de reserva del vuelo de {n} a Lisboa?"),
        "ru": ("Подтверждение бронирования для {n}: рейс в Лиссабон, код брони QX{v}.",
               "какой код брони у рейса {n} в Лиссабон?"),
        "zh": ("{n}的预订确认：飞往里斯本的航班，预订代码QX{v}。", "{n}飞里斯本的航班预订代码是什么？"),
        "ja": ("{n}様の予約確認：リスボン行きの便、予約番号QX{v}。", "{n}のリスボン行きの便の予約番号は？"),
    },
    "bank": {
        "en": ("Account details for {n}: IBAN FR76 3000 {v} 0001.",
               "what is the IBAN of {n}'s account?"),
        "de": ("Kontodaten von {n}: IBAN DE89 3704 {v} 0532.",
               "wie lautet die IBAN von {n}?"),
        "fr": ("Relevé d'identité bancaire de {n} : IBAN FR76 3000 {v} 0001.",
               "c'est quoi l'IBAN de {n} ?"),
        "es": ("Datos de la cuenta de {n}: IBAN ES91 2100 {v} 1332.",
               "¿cuál es el IBAN de la cuenta de {n}?"),
        "ru": ("Реквизиты счёта {n}: IBAN RU02 0445 {v} 2250.",
               "какой IBAN у счёта {n}?"),
        "zh": ("{n}的账户信息：IBAN CN12 3456 {v} 7890。", "{n}的账户IBAN是多少？"),
        "ja": ("{n}の口座情報：IBAN JP12 3456 {v} 7890。", "{n}の口座のIBANは？"),
    },
    "car": {
        "en": ("Garage {n}: the car was serviced at {v}0 km, the tyres were changed.",
               "at what mileage did garage {n} service the car?"),
        "de": ("Werkstatt {n}: Das Auto wurde bei {v}0 km gewartet, die Reifen gewechselt.",
               "bei welchem Kilometerstand war das Auto in der Werkstatt {n}?"),
        "fr": ("Garage {n} : la voiture a été révisée à {v}0 km, pneus changés.",
               "à combien de km le garage {n} a fait la révision ?"),
        "es": ("Taller {n}: el coche pasó la revisión a los {v}0 km, neumáticos cambiados.",
               "¿a cuántos km hizo el taller {n} la revisión del coche?"),
        "ru": ("Автосервис {n}: машина прошла ТО на пробеге {v}0 км, шины заменены.",
               "на каком пробеге автосервис {n} делал ТО?"),
        "zh": ("{n}修车厂：汽车在{v}0公里时做了保养，更换了轮胎。", "{n}修车厂在多少公里时给车做了保养？"),
        "ja": ("{n}整備工場：車は{v}0キロで点検し、タイヤを交換しました。", "{n}整備工場で何キロの時に点検した？"),
    },
}  # fmt: skip

FORMATS = ("pdf", "docx", "odt", "eml", "html", "md", "txt")
LATIN_PDF = ("en", "de", "fr", "es")  # the test PDFs' font has Latin letters only


def write_facts(folder: Path) -> list[dict[str, str]]:
    """The fact documents, and the questions with the file that answers each."""
    folder.mkdir(parents=True, exist_ok=True)
    cases = []
    number = 0
    for kind, by_language in FACTS.items():
        for language, (fact, question) in by_language.items():
            for i, (name, value) in enumerate(zip(NAMES, VALUES, strict=True)):
                slots = {"n": name, "v": value, "v2": str(int(value) % 50 + 10)}
                text = fact.format(**slots)
                fmt = FORMATS[number % len(FORMATS)]
                if fmt == "pdf" and language not in LATIN_PDF:
                    fmt = "docx"
                number += 1
                path = folder / f"scan-{number:04d}.{fmt}"
                filler = f"Reference {kind[:2].upper()}-{value}-{i}."
                if fmt == "pdf":
                    write_pdf(path, [filler, text])
                elif fmt == "docx":
                    write_docx(path, [("", filler), ("", text)])
                elif fmt == "odt":
                    write_odt(path, [("p", filler), ("p", text)])
                elif fmt == "eml":
                    write_eml(path, "office@example.org", "me@example.org", filler, text)
                elif fmt == "html":
                    path.write_text(f"<html><body><p>{filler}</p><p>{text}</p></body></html>")
                else:
                    path.write_text(f"{filler}\n\n{text}\n", encoding="utf-8")
                cases.append(
                    {
                        "kind": kind,
                        "language": language,
                        "question": question.format(**slots),
                        "file": str(path),
                    }
                )
    return cases


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--others", type=int, default=3000, help="documents around the facts")
    parser.add_argument(
        "--no-names",
        action="store_true",
        help="ask without the name (any of the three facts of that kind and language counts)",
    )
    parser.add_argument("--json", metavar="FILE", help="also write the figures as JSON")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="retrieval-documents-"))
    try:
        write_corpus(work / "corpus" / "others", args.others)
        cases = write_facts(work / "corpus" / "facts")
        index = DocumentIndex(work / "documents.sqlite3", [work / "corpus"])
        index.update()
        by_language: dict[str, list[int]] = defaultdict(lambda: [0, 0])
        by_kind: dict[str, list[int]] = defaultdict(lambda: [0, 0])
        misses = []
        answers: dict[tuple[str, str], set[Path]] = defaultdict(set)
        for case in cases:
            answers[case["kind"], case["language"]].add(Path(case["file"]).resolve())
        for case in cases:
            question = case["question"]
            right = {Path(case["file"]).resolve()}
            if args.no_names:
                for name in NAMES:
                    question = " ".join(question.replace(name, " ").split())
                right = answers[case["kind"], case["language"]]
            case["question"] = question
            hits = index.search(question, 5)
            found = any(Path(h.path) in right for h in hits)
            for table, key in ((by_language, case["language"]), (by_kind, case["kind"])):
                table[key][0] += found
                table[key][1] += 1
            if not found:
                misses.append(
                    {"question": case["question"], "got": [Path(h.path).name for h in hits]}
                )
        index.close()
        recalled = sum(v[0] for v in by_language.values())
        report = {
            "questions": len(cases),
            "others": args.others,
            "names_in_questions": not args.no_names,
            "recall_at_5": round(recalled / len(cases), 3),
            "by_language": {k: round(v[0] / v[1], 3) for k, v in sorted(by_language.items())},
            "by_kind": {k: round(v[0] / v[1], 3) for k, v in sorted(by_kind.items())},
            "misses": misses,
        }
        print(
            f"recall@5: {report['recall_at_5']} ({recalled} of {len(cases)} questions, "
            f"{args.others:,} other documents)"
        )
        print("by language:", report["by_language"])
        print("by kind:", report["by_kind"])
        for miss in misses:
            print(f"  missed: {miss['question']}  (got {', '.join(miss['got']) or 'nothing'})")
        if args.json:
            Path(args.json).write_text(json.dumps(report, ensure_ascii=False, indent=2) + "\n")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
