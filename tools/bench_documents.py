"""Measure the documents index on a generated corpus: indexing speed, size, memory, query latency.

    python tools/bench_documents.py                  # 20,000 files
    python tools/bench_documents.py --files 2000     # smaller, on a busy machine
    python tools/bench_documents.py --json out.json

Writes a corpus (deterministic, seed 38) of text, Markdown, HTML, e-mail, docx, xlsx, odt and
PDF files in seven languages (English, German, French, Spanish, Russian, Chinese, Japanese;
made-up sentences from each language's common words, so word frequencies are natural-ish) into
a temporary folder, indexes it with the app's own ``DocumentIndex`` (documents read in its
worker process, as the app does), and prints files/s and MB/s of indexing, the index's size
against the corpus's, the peak memory of this process and of the reader process, the time an
update takes to see one changed file (the rescan a search runs), and the median and p95
latency of searches of one to three words (the corpus's own words, so most have results).
"""

# ruff: noqa: RUF001 (made-up words in Cyrillic)

from __future__ import annotations

import argparse
import json
import random
import resource
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from botpsy_desktop.adapters.documents.index import DocumentIndex  # noqa: E402
from tests.helpers.documents import (  # noqa: E402
    write_docx,
    write_eml,
    write_odt,
    write_pdf,
    write_xlsx,
)

WORDS = {
    "en": "the lease ends invoice plumber insurance windscreen contract notice period rent "
    "deposit tenant landlord payment due date tax number receipt warranty repair boiler meeting "
    "school trip doctor appointment bank account salary holiday flight hotel booking garden",
    "de": "der Mietvertrag endet Rechnung Klempner Versicherung Windschutzscheibe Vertrag "
    "Kündigungsfrist Miete Kaution Mieter Vermieter Zahlung fällig Steuernummer Quittung "
    "Garantie Reparatur Heizung Termin Schule Ausflug Arzt Konto Gehalt Urlaub Flug Hotel",
    "fr": "le bail se termine facture plombier assurance pare-brise contrat préavis loyer "
    "caution locataire propriétaire paiement échéance numéro fiscal reçu garantie réparation "
    "chaudière réunion école sortie médecin rendez-vous compte salaire vacances vol hôtel",
    "es": "el contrato de alquiler termina factura fontanero seguro parabrisas aviso renta "
    "fianza inquilino propietario pago vencimiento número fiscal recibo garantía reparación "
    "caldera reunión escuela excursión médico cita cuenta sueldo vacaciones vuelo hotel",
    "ru": "договор аренды заканчивается счёт сантехник страховка лобовое стекло уведомление "
    "оплата залог арендатор хозяин платёж срок налоговый номер квитанция гарантия ремонт "
    "котёл встреча школа экскурсия врач приём счёт зарплата отпуск рейс гостиница",
    "zh": "租约 到期 发票 水管工 保险 挡风玻璃 合同 通知期 房租 押金 租客 房东 付款 截止日期 税号 "
    "收据 保修 维修 锅炉 会议 学校 旅行 医生 预约 银行 账户 工资 假期 航班 酒店",
    "ja": "賃貸契約 終了 請求書 配管工 保険 フロントガラス 契約 通知期間 家賃 敷金 入居者 大家 "
    "支払い 期限 税番号 領収書 保証 修理 ボイラー 会議 学校 遠足 医者 予約 銀行 口座 給料",
}
KINDS = ("txt", "md", "html", "eml", "docx", "xlsx", "odt", "pdf")
SYLLABLES = {
    "latin": ("ka", "ro", "mi", "ne", "tu", "sa", "le", "po", "vi", "da", "ber", "ton", "gal",
              "mur", "fen", "stri", "ach", "ung", "eau", "ier"),
    "ru": ("ка", "ро", "ми", "не", "ту", "са", "ле", "по", "ви", "да", "бер", "тон", "гал",
           "мур", "фен", "стри", "ач", "унг"),
    "zh": tuple(
        "的一是不了人我在有他这中大来上国个到说们为子和你地出道也时年得就那要下以生会自着去之过家学"
        "对可她里后小么心多天而能好都然没日于起还发成事只作当想看文无开手十用主行方又如前所本见经头"
        "面公同三已老从动两长知民样现分将外但身些与高意进把法此实回二理美点月明其种声全工己话儿者向"
        "情部正名定女问力机给等几很业最间新什打便位因重被走电四第门相次东政海口使教西再平真听世气信"
    ),
    "ja": tuple(
        "あいうえおかきくけこさしすせそたちつてとなにぬねのはひふへほまみむめもやゆよらりるれろわを"
        "ん日本人大年出中子上生事分行見月後前時間気家思下自会社手"
    ),
}  # fmt: skip
_VOCAB: dict[str, tuple[list[str], list[float]]] = {}


def vocabulary(language: str) -> tuple[list[str], list[float]]:
    """The language's common words, then 5,000 made-up ones, with Zipf weights (rank r: 1/r):
    a few words everywhere, most words rare, as in real text."""
    if language not in _VOCAB:
        rng = random.Random(language)
        syllables = SYLLABLES.get(language) or SYLLABLES["ru" if language == "ru" else "latin"]
        made = set()
        while len(made) < 5000:
            n = rng.randint(2, 3) if language in ("zh", "ja") else rng.randint(2, 4)
            made.add("".join(rng.choice(syllables) for _ in range(n)))
        words = WORDS[language].split() + sorted(made)
        rng.shuffle(words)
        total, cumulative = 0.0, []
        for rank in range(len(words)):
            total += 1 / (rank + 1)
            cumulative.append(total)
        _VOCAB[language] = (words, cumulative)
    return _VOCAB[language]


def sentence(rng: random.Random, language: str) -> str:
    words, cumulative = vocabulary(language)
    n = rng.randint(6, 14)
    picked = [*rng.choices(words, cum_weights=cumulative, k=n), str(rng.randint(1, 9999))]
    joiner = "" if language in ("zh", "ja") else " "
    return joiner.join(picked) + ("。" if language in ("zh", "ja") else ".")


def write_corpus(folder: Path, files: int, seed: int = 38) -> int:
    rng = random.Random(seed)
    languages = list(WORDS)
    for i in range(files):
        sub = folder / f"d{i // 500:03d}"
        sub.mkdir(parents=True, exist_ok=True)
        language = languages[i % len(languages)]
        kind = KINDS[i % len(KINDS)]
        paragraphs = [
            " ".join(sentence(rng, language) for _ in range(rng.randint(2, 6)))
            for _ in range(rng.randint(2, 8))
        ]
        path = sub / f"doc{i:06d}-{language}.{kind}"
        if kind in ("txt", "md"):
            path.write_text("\n\n".join(paragraphs), encoding="utf-8")
        elif kind == "html":
            body = "".join(f"<p>{p}</p>" for p in paragraphs)
            path.write_text(f"<html><body><h1>{language}</h1>{body}</body></html>", "utf-8")
        elif kind == "eml":
            write_eml(
                path, "a@example.org", "b@example.org", paragraphs[0][:40], "\n".join(paragraphs)
            )
        elif kind == "docx":
            write_docx(path, [("", p) for p in paragraphs])
        elif kind == "xlsx":
            write_xlsx(path, {"Sheet1": [[p[:80], rng.randint(1, 999)] for p in paragraphs]})
        elif kind == "odt":
            write_odt(path, [("p", p) for p in paragraphs])
        else:  # PDF text in WinAnsi: Latin languages only, the others as English
            text = (
                paragraphs
                if language in ("en", "de", "fr", "es")
                else [" ".join(sentence(rng, "en") for _ in range(3)) for _ in paragraphs]
            )
            pages = ["\n".join(t[j : j + 90] for j in range(0, len(t), 90)) for t in text[:3]]
            write_pdf(path, pages)
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file())


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--files", type=int, default=20_000)
    parser.add_argument("--queries", type=int, default=300)
    parser.add_argument("--readers", type=int, default=2, help="files read side by side")
    parser.add_argument("--json", metavar="FILE", help="also write the figures as JSON")
    parser.add_argument("--keep", metavar="DIR", help="write the corpus and index here, kept")
    args = parser.parse_args()
    work = Path(args.keep) if args.keep else Path(tempfile.mkdtemp(prefix="bench-documents-"))
    corpus, index_file = work / "corpus", work / "index" / "documents.sqlite3"
    try:
        began = time.perf_counter()
        corpus_bytes = write_corpus(corpus, args.files)
        print(
            f"corpus: {args.files:,} files, {corpus_bytes / 1e6:.1f} MB, written in "
            f"{time.perf_counter() - began:.1f} s",
            flush=True,
        )
        index = DocumentIndex(index_file, [corpus], readers=args.readers)
        began = time.perf_counter()
        state = index.update()
        took = time.perf_counter() - began
        status = index.status()
        figures: dict[str, object] = {
            "files": args.files,
            "readers": args.readers,
            "corpus_mb": round(corpus_bytes / 1e6, 2),
            "indexed": status["indexed"],
            "not_indexed": status["not_indexed"],
            "index_s": round(took, 2),
            "files_per_s": round(args.files / took, 1),
            "mb_per_s": round(corpus_bytes / 1e6 / took, 3),
            "text_mb_per_s": round(status["text_chars"] / 1e6 / took, 3),
            "index_mb": round(status["bytes"] / 1e6, 2),
            "index_to_corpus": round(status["bytes"] / corpus_bytes, 3),
            "passages": status["passages"],
        }
        assert state.complete
        # one file changed: what the rescan before a search costs to see it
        changed = next(corpus.rglob("*.txt"))
        changed.write_text("zebracorn appears here now", encoding="utf-8")
        began = time.perf_counter()
        again = index.update()
        figures["see_a_change_s"] = round(time.perf_counter() - began, 3)
        assert again.read == 1 and index.search("zebracorn")
        rng = random.Random(7)
        times = []
        hits = 0
        for _ in range(args.queries):  # words drawn as the text draws them: mostly common
            words, cumulative = vocabulary(rng.choice(list(WORDS)))
            picked = rng.choices(words, cum_weights=cumulative, k=rng.randint(1, 3))
            query = " ".join(picked)
            began = time.perf_counter()
            found = index.search(query, 5)
            times.append((time.perf_counter() - began) * 1000)
            hits += bool(found)
        times.sort()
        figures["query_median_ms"] = round(statistics.median(times), 2)
        figures["query_p95_ms"] = round(times[int(len(times) * 0.95) - 1], 2)
        figures["queries_with_results"] = round(hits / len(times), 3)
        index.close()
        figures["peak_rss_mb"] = round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)
        figures["reader_peak_rss_mb"] = round(
            resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024, 1
        )
        for key, value in figures.items():
            print(f"{key}: {value}")
        if args.json:
            Path(args.json).write_text(json.dumps(figures, indent=2) + "\n", encoding="utf-8")
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
