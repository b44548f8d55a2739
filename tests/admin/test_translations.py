"""The admin pages in French and German: the pages rendered with ``LANGUAGE_CODE`` set (and with
a browser's Accept-Language), and the catalogs themselves: every entry translated, none fuzzy,
the compiled .mo saying what the .po says, and the .po holding every string the templates and
the Python code mark (when xgettext is installed)."""

import gettext
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from django.template.base import Lexer, TokenType

from .helpers import body, fail_task, messages_of, start_task, url

PACKAGE = Path(__file__).resolve().parents[2] / "django_blueque"
LOCALE = PACKAGE / "locale"
LANGUAGES = ("fr", "de")
NBSP = "\u00a0"  # French puts a no-break space before : ; ? ! and inside « », as Django's does

# Per page: strings only a translated page has, and the English ones it must not have.
EXPECTED = {
    "dashboard": {
        "fr": ["Tableau de bord", "Files d’attente", "Écouteurs", "Plus ancienne en attente",
               "Tâches détenues", "Tâches périodiques", "Trouver une tâche par son identifiant",
               f"périmé{NBSP}: pulsation expirée", "1 actif", "il y a ", "Accueil"],
        "de": ["Übersicht", "Warteschlangen", "Listener", "Älteste wartende",
               "Gehaltene Aufgaben", "Periodische Aufgaben", "Aufgabe nach ID suchen",
               "veraltet: Lebenszeichen abgelaufen", "1 aktiv", "vor ", "Start"],
        "en": ["Dashboard", "Queues", "Listeners", "Oldest pending", "Tasks held",
               "Periodic tasks", "Find a task by id", "stale: heartbeat expired", "1 live",
               " ago", "Home"],
    },
    "queue": {
        "fr": ["Tentatives", "Paramètres", ">Erreur<", "Relancer les 2 tâches en échec…",
               "Page 1 sur 1 (2 tâches)", f"Annulation{NBSP}:", "Sélectionner la tâche ",
               f"Action{NBSP}:", "Lignes", "Afficher"],
        "de": ["Versuche", "Parameter", ">Fehler<", "Alle 2 fehlgeschlagenen Aufgaben erneut "
               "versuchen…", "Seite 1 von 1 (2 Aufgaben)", "Abgebrochene Aufgaben:",
               "Aufgabe ", " auswählen", "Aktion:", "Zeilen", "Anzeigen"],
        "en": ["Attempts", "Parameters", ">Error<", "Retry all 2 failed tasks…",
               "Page 1 of 1 (2 tasks)", "Cancelled tasks:", "Select task ", "Action:", "Rows",
               ">Show<"],
    },
    "task": {
        "fr": ["Chronologie", "Tous les champs", "Bail", f"détenu (renouvelé{NBSP}; sinon, "
               "expire dans", "Exécutions", "démarrée (dernière exécution)", "Progression",
               "Nœud", "dernière pulsation <span"],
        "de": ["Zeitleiste", "Alle Felder", "Lease", "gehalten (wird erneuert; läuft sonst in",
               "Läufe", "gestartet (letzter Lauf)", "Fortschritt", "Knoten",
               "letztes Lebenszeichen <span"],
        "en": ["Timeline", "Every field", "Lease", "held (renewed; expires in", "Runs",
               "started (last run)", "Progress", "Node", "heartbeat <span"],
    },
    "listeners": {
        "fr": ["Écouteurs", "sur la file d’attente q", "Pulsation", "Tâches détenues", ">actif<",
               "Progression", "Démarrée", "Paramètres", "Hôte"],
        "de": ["Listener", "auf der Warteschlange q", "Lebenszeichen", "Gehaltene Aufgaben",
               ">aktiv<", "Fortschritt", "Gestartet", "Parameter", "Host"],
        "en": ["Listeners", "on queue q", "Heartbeat", "Tasks held", ">live<", "Progress",
               "Started", "Parameters", "Host"],
    },
}
# English that must be gone from a translated page (the English column minus words that the
# translation shares, such as "Lease", "Host" or "Listener" in German).
ENGLISH_ONLY = {page: {lang: [text for text in expected["en"]
                             if not any(text in other for other in expected[lang])]
                      for lang in LANGUAGES}
                for page, expected in EXPECTED.items()}


@pytest.fixture
def pages(admin, blueque):
    """Redis holding something for each page: a running task on queue q (its listener is
    live), two failed tasks on queue f, and a dead listener. Returns {page: path}."""
    task_id, _token = start_task(blueque, "q")
    fail_task(blueque, "f")
    fail_task(blueque, "f")
    blueque.protocol.heartbeat("dead-1_7", ["q"], {"host": "dead-1", "pid": 7}, ttl=-30)
    return {"dashboard": url(""), "queue": url("", name="f", state="failed"),
            "task": url(f"tasks/{task_id}/"), "listeners": url("listeners/")}


def render(client, path, **headers):
    response = client.get(path, **headers)
    assert response.status_code == 200, body(response)[:2000]
    return body(response)


def assert_in_language(page, name, lang):
    missing = [text for text in EXPECTED[name][lang] if text not in page]
    assert not missing, f"{name} in {lang}: missing {missing}"
    if lang != "en":
        english = [text for text in ENGLISH_ONLY[name][lang] if text in page]
        assert not english, f"{name} in {lang}: still in English: {english}"


@pytest.mark.parametrize("lang", [*LANGUAGES, "en"])
def test_pages_are_rendered_in_the_language_of_the_language_code(admin, pages, settings,
                                                                  lang):
    settings.LANGUAGE_CODE = "en-us" if lang == "en" else lang
    for name, path in pages.items():
        page = render(admin, path)
        assert f'<html lang="{lang}"' in page  # the admin's own template: Django's catalog
        assert_in_language(page, name, lang)


# The task states in each language, in the order of rows.STATES.
STATE_NAMES = {
    "fr": ["planifiée", "en attente", "réservée", "démarrée", "terminée", "en échec"],
    "de": ["geplant", "wartend", "reserviert", "gestartet", "abgeschlossen", "fehlgeschlagen"],
    "en": ["scheduled", "pending", "reserved", "started", "complete", "failed"],
}


@pytest.mark.parametrize("lang", [*LANGUAGES, "en"])
def test_state_names_are_translated_but_not_the_values_in_links_and_forms(admin, pages,
                                                                           settings, lang):
    """The states' labels are the page's language; the values in URLs and forms stay the
    protocol's (the wire values, which Redis holds and the views filter on)."""
    settings.LANGUAGE_CODE = "en-us" if lang == "en" else lang
    names = STATE_NAMES[lang]
    dashboard = render(admin, pages["dashboard"])
    headers = re.findall(r'<th scope="col" class="num">([^<]*)</th>', dashboard)
    assert names == headers[:len(names)], headers
    queue = render(admin, pages["queue"])
    tabs = re.findall(r'>([^<>]*) <span class="blueque-count"', queue)
    assert tabs == names, tabs
    assert f"&rsaquo; {names[-1]}" in queue  # the breadcrumb of the failed tasks' page
    assert all(f"state={state}" in queue for state in STATE_NAMES["en"])
    assert 'name="state" value="failed"' in queue
    task = render(admin, pages["task"])
    assert f'data-bq-field="status">{names[3]}</span>' in task  # its running task
    if lang == "fr":
        assert "Supprimer les 2 tâches « en échec »…".replace("« ", f"«{NBSP}").replace(
            " »", f"{NBSP}»") in queue


@pytest.mark.parametrize("lang", LANGUAGES)
def test_pages_follow_the_browsers_language(admin, pages, settings, lang):
    """LocaleMiddleware (in the testproject's MIDDLEWARE): Accept-Language wins over the
    LANGUAGE_CODE default."""
    assert "django.middleware.locale.LocaleMiddleware" in settings.MIDDLEWARE
    settings.LANGUAGE_CODE = "en-us"
    page = render(admin, pages["dashboard"], HTTP_ACCEPT_LANGUAGE=f"{lang},en;q=0.5")
    assert_in_language(page, "dashboard", lang)


@pytest.mark.parametrize(("lang", "one", "two"), [
    ("fr", "1 tâche relancée : elle est retournée dans sa file d’attente.",
     "2 tâches relancées : elles sont retournées dans leur file d’attente."),
    ("de", "1 Aufgabe erneut versucht: Sie ist zurück in ihrer Warteschlange.",
     "2 Aufgaben erneut versucht: Sie sind zurück in ihrer Warteschlange."),
])
def test_messages_of_the_views_are_translated_with_their_plural(admin, blueque, settings,
                                                                lang, one, two):
    settings.LANGUAGE_CODE = lang
    ids = [fail_task(blueque, "q") for _ in range(3)]
    for selected, expected in (([ids[0]], one), (ids[1:], two)):
        response = admin.post(url("actions/"), {"action": "retry", "ids": selected,
                                                "confirm": "yes", "next": url("")})
        assert response.status_code == 302
        assert messages_of(response) == [expected.replace(" :", f"{NBSP}:")]


# The catalogs.

def unquote(text):
    """A PO string literal's content (C escapes)."""
    return re.sub(r'\\(["\\ntr])',
                  lambda m: {"n": "\n", "t": "\t", "r": "\r"}.get(m[1], m[1]), text)


def read_po(path):
    """[{'msgctxt', 'msgid', 'msgid_plural', 'msgstr': {index: text}, 'flags', 'obsolete'}]"""
    entries, entry, field = [], None, None
    for raw in path.read_text(encoding="utf-8").splitlines() + [""]:
        line = raw.strip()
        if not line:
            if entry:
                entries.append(entry)
            entry, field = None, None
            continue
        if entry is None:
            entry = {"msgctxt": None, "msgid": "", "msgid_plural": None, "msgstr": {},
                     "flags": set(), "obsolete": False}
        if line.startswith("#~"):
            entry["obsolete"] = True
            continue
        if line.startswith("#,"):
            entry["flags"].update(flag.strip() for flag in line[2:].split(","))
            continue
        if line.startswith("#"):
            continue
        keyword = re.match(r'(msgctxt|msgid_plural|msgid|msgstr(?:\[(\d+)\])?)\s+"(.*)"$', line)
        if keyword:
            name, index, text = keyword[1], keyword[2], unquote(keyword[3])
            if name.startswith("msgstr"):
                field = ("msgstr", int(index or 0))
                entry["msgstr"][field[1]] = text
            else:
                field = (name, None)
                entry[name] = text
            continue
        assert line.startswith('"') and line.endswith('"') and field, f"{path}: {raw!r}"
        if field[0] == "msgstr":
            entry["msgstr"][field[1]] += unquote(line[1:-1])
        else:
            entry[field[0]] += unquote(line[1:-1])
    return entries


def catalog(lang):
    path = LOCALE / lang / "LC_MESSAGES" / "django.po"
    entries = read_po(path)
    header = next(entry for entry in entries if entry["msgid"] == "")
    fields = dict(line.split(": ", 1) for line in header["msgstr"][0].splitlines() if line)
    return path, header, fields, [entry for entry in entries if entry["msgid"]]


PLACEHOLDER = re.compile(r"%(?:\((\w+)\))?[-#0 +]*\d*(?:\.\d+)?[sdifr%]")


def placeholders(text):
    return sorted(m[0] for m in PLACEHOLDER.finditer(text))


@pytest.mark.parametrize("lang", LANGUAGES)
def test_catalog_is_complete_and_nothing_is_fuzzy(lang):
    path, header, fields, entries = catalog(lang)
    assert len(entries) > 200, f"{path}: only {len(entries)} entries"
    assert "fuzzy" not in header["flags"]
    assert fields["Language"] == lang
    assert fields["Content-Type"] == "text/plain; charset=UTF-8"
    nplurals = int(re.search(r"nplurals=(\d+)", fields["Plural-Forms"])[1])
    problems = []
    for entry in entries:
        name = entry["msgid"]
        if entry["obsolete"]:
            problems.append(("obsolete", name))
        if "fuzzy" in entry["flags"]:
            problems.append(("fuzzy", name))
        forms = entry["msgstr"]
        expected = list(range(nplurals)) if entry["msgid_plural"] is not None else [0]
        if sorted(forms) != expected or not all(text.strip() for text in forms.values()):
            problems.append(("untranslated", name))
            continue
        if "python-format" in entry["flags"]:
            wanted = placeholders(name)
            for text in forms.values():
                # a plural's singular may leave out the count ("une seconde"), nothing else
                if placeholders(text) != wanted and not (
                        entry["msgid_plural"] is not None
                        and set(placeholders(text)) <= set(wanted)):
                    problems.append(("placeholders", name, text))
        for text in forms.values():
            if name.endswith("\n") != text.endswith("\n"):
                problems.append(("newline", name))
            if lang == "fr" and re.search(r" [:;?!»]|« ", text):
                problems.append(("French spacing (no-break space)", name, text))
    assert not problems, problems


@pytest.mark.parametrize("lang", LANGUAGES)
def test_compiled_catalog_says_what_the_po_says(lang):
    """The .mo in the package (what Django reads) is the compiled .po, entry for entry."""
    path, _header, fields, entries = catalog(lang)
    with open(path.with_suffix(".mo"), "rb") as mo:
        translations = gettext.GNUTranslations(mo)
    assert translations.info()["language"] == lang
    assert translations.info()["plural-forms"] == fields["Plural-Forms"]
    plural = gettext.c2py(fields["Plural-Forms"].split("plural=", 1)[1].rstrip(";"))
    for entry in entries:
        msgid, context = entry["msgid"], entry["msgctxt"]
        if entry["msgid_plural"] is None:
            got = (translations.pgettext(context, msgid) if context
                   else translations.gettext(msgid))
            assert got == entry["msgstr"][0], msgid
            continue
        for n in (0, 1, 2, 5, 21, 1_000_000):
            got = (translations.npgettext(context, msgid, entry["msgid_plural"], n) if context
                   else translations.ngettext(msgid, entry["msgid_plural"], n))
            assert got == entry["msgstr"][plural(n)], (msgid, n)
    # and nothing more: no entry the .po lost is still served from a stale .mo
    compiled = {key if isinstance(key, str) else key[0]
                for key in translations._catalog} - {""}
    in_po = {f"{entry['msgctxt']}\x04{entry['msgid']}" if entry["msgctxt"] else entry["msgid"]
             for entry in entries}
    assert compiled == in_po


@pytest.mark.skipif(not all(map(shutil.which, ("xgettext", "msguniq", "msgmerge", "msgattrib"))),
                    reason="makemessages needs GNU gettext (apt-get install gettext)")
def test_catalogs_hold_every_marked_string(tmp_path):
    """makemessages run on a copy of the package finds no string the .po files lack (and
    none they hold for nothing): a string marked later without a translation fails here."""
    copy = tmp_path / "django_blueque"
    shutil.copytree(PACKAGE, copy, ignore=shutil.ignore_patterns("__pycache__", "*.mo"))
    for lang in LANGUAGES:
        (copy / "locale" / lang / "LC_MESSAGES" / "django.po").unlink()
    done = subprocess.run(
        [sys.executable, "-m", "django", "makemessages", "-l", "fr", "--no-obsolete"],
        cwd=copy, capture_output=True, text=True, timeout=300,
        env={"PATH": str(Path(sys.executable).parent) + ":/usr/bin:/bin",
             "DJANGO_SETTINGS_MODULE": "testproject.settings",
             "PYTHONPATH": f"{PACKAGE.parent}:{PACKAGE.parent / 'testproject'}"})
    assert done.returncode == 0, done.stderr
    extracted = {(entry["msgctxt"], entry["msgid"], entry["msgid_plural"])
                 for entry in read_po(copy / "locale" / "fr" / "LC_MESSAGES" / "django.po")
                 if entry["msgid"]}
    for lang in LANGUAGES:
        held = {(entry["msgctxt"], entry["msgid"], entry["msgid_plural"])
                for entry in catalog(lang)[3]}
        assert sorted(extracted - held) == [], f"{lang}: not in the catalog"
        assert sorted(held - extracted) == [], f"{lang}: no longer marked in the sources"


# Every string a template shows is marked for translation.

ALLOWED = {"JSON", "Prometheus"}  # names, the same in every language
HIDDEN_BLOCKS = {"bodyclass"}  # blocks of the admin's base.html that show no text
VISIBLE_ATTRIBUTES = re.compile(r'\b(?:title|aria-label|placeholder|alt)="([^"]*)"')


def untranslated_text(source):
    """Words a template shows that no translation tag holds."""
    words, kept, depth, blocks = [], [], 0, []
    for token in Lexer(source).tokenize():
        if token.token_type == TokenType.BLOCK:
            tag, *args = token.contents.split()
            if tag in ("blocktranslate", "blocktrans", "comment"):
                depth += 1
            elif tag in ("endblocktranslate", "endblocktrans", "endcomment"):
                depth -= 1
            elif tag == "block":
                blocks.append(args[0])
            elif tag == "endblock":
                blocks.pop()
            kept.append("\x00")
        elif token.token_type == TokenType.TEXT and not depth and not HIDDEN_BLOCKS & {*blocks}:
            kept.append(token.contents)
        elif token.token_type != TokenType.TEXT:
            kept.append("\x00")
    html = "".join(kept)
    for value in VISIBLE_ATTRIBUTES.findall(html):
        words += re.findall(r"[A-Za-z]{2,}", value)
    text = re.sub(r"&\w+;|<[^>]*>", " ", html)
    words += re.findall(r"[A-Za-z]{2,}", text)
    return [word for word in words if word not in ALLOWED]


def test_every_visible_template_string_is_marked():
    templates = sorted((PACKAGE / "templates").rglob("*.html"))
    assert templates
    found = {path.name: untranslated_text(path.read_text(encoding="utf-8"))
             for path in templates}
    assert {name: words for name, words in found.items() if words} == {}
    # the check itself sees text outside the tags
    assert untranslated_text('<p title="Hi there">{% translate "a" %} Hello</p>') == [
        "Hi", "there", "Hello"]
