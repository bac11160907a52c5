"""Text of the AOL log: query tokens, URL words and the unigram word segmenter for
host names (FedPS Sec. 4.1; documents' only own text in this log is their URL)."""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence

from fedrank.errors import ConfigError

_TOKEN = re.compile(r"[^\W_]+")


_SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.\-]*://")


_WWW = re.compile(r"^(www\d*|ww)$")


#: Generic top-level domains dropped from host names (every two-letter final label is a
#: country code and is dropped too).
GENERIC_TLDS = frozenset({
    "com", "org", "net", "edu", "gov", "mil", "int", "info", "biz", "name", "pro", "aero",
    "coop", "museum", "mobi", "asia", "tel", "travel", "jobs", "cat", "arpa", "post", "xxx",
})  # fmt: skip


#: Registry labels that sit under a country code (``co.uk``, ``com.au``, ``ac.jp``, ...).
COUNTRY_SECOND_LEVEL = frozenset({
    "ac", "co", "com", "ed", "edu", "gen", "go", "gob", "gouv", "gov", "govt", "gv", "lg",
    "ltd", "mil", "ne", "net", "nhs", "nic", "nom", "or", "org", "plc", "police", "sch",
})  # fmt: skip


#: Labels between a US state and ``us`` in the locality domains (``k12.ca.us``).
_US_LOCALITY = frozenset({"k12", "lib", "cc", "tec", "pvt", "gen"})


#: Country codes whose two-letter second level is a state or province (``tx.us``, ``on.ca``).
_STATE_COUNTRIES = frozenset({"us", "ca"})


#: Generic TLDs under which a two-letter label is a registry or state label (``uk.com``,
#: ``gb.net``, ``ca.gov``) when a name remains in front of it.
_TWO_LETTER_UNDER = frozenset({"com", "net", "gov"})


#: Words dropped from URL paths: scheme names, ``www`` and web file extensions.
URL_STOP_WORDS = frozenset(
    {"http", "https", "www", "html", "htm", "shtml", "php", "asp", "aspx", "jsp", "cgi", "cfm"}
)


def tokenize(text: str) -> list[str]:
    """Lowercase ``text`` and split it on every non-alphanumeric character (``_`` included).

    >>> tokenize("Marblehead, Massachusetts LIBRARY")
    ['marblehead', 'massachusetts', 'library']
    """
    return _TOKEN.findall(text.lower())


def _host_and_path(url: str) -> tuple[str, str]:
    rest = _SCHEME.sub("", url.strip(), count=1)
    cut = len(rest)
    for sep in "/?#":
        i = rest.find(sep)
        if 0 <= i < cut:
            cut = i
    host, path = rest[:cut], rest[cut:]
    host = host.rsplit("@", 1)[-1].split(":", 1)[0].lower().strip(".")
    return host, path


def _split_host(host: str) -> tuple[list[str], list[str]]:
    """Host labels without ``www`` and without the public suffix, and the suffix labels."""
    labels = [x for x in host.split(".") if x]
    while labels and _WWW.match(labels[0]):
        labels.pop(0)
    suffix: list[str] = []
    if not labels:
        return labels, suffix
    tld = labels[-1]
    is_country = len(tld) == 2 and tld.isascii() and tld.isalpha()
    if tld in GENERIC_TLDS or is_country:
        suffix.insert(0, labels.pop())
        if len(labels) > 1:
            second = labels[-1]
            two_letter = len(second) == 2 and second.isalpha()
            if (is_country and second in COUNTRY_SECOND_LEVEL) or (
                two_letter and (tld in _STATE_COUNTRIES or tld in _TWO_LETTER_UNDER)
            ):
                suffix.insert(0, labels.pop())
                if tld == "us" and len(labels) > 1 and labels[-1] in _US_LOCALITY:
                    suffix.insert(0, labels.pop())
    return labels, suffix


def url_site(url: str) -> str:
    """The registrable domain of ``url``: its last name label plus the public suffix.

    ``http://library.harvard.edu/x`` -> ``"harvard.edu"``; ``http://www.bbc.co.uk/`` ->
    ``"bbc.co.uk"``. Used to count in how many different sites a word occurs
    (:func:`segmenter_counts`).
    """
    labels, suffix = _split_host(_host_and_path(url)[0])
    return ".".join(labels[-1:] + suffix)


def url_words(url: str) -> list[str]:
    """The words of a URL before segmentation: host labels, then path words.

    Drops the scheme, ``www`` (``www2``, ...), the public suffix (generic TLDs such as
    ``com``/``org``/``edu``, every two-letter country code, and registry second levels such
    as ``co.uk``, ``com.au``, ``k12.ca.us``), and in the path the words of
    :data:`URL_STOP_WORDS`. Each remaining label or path part is split with
    :func:`tokenize` (so ``paladin-press`` gives two words).

    >>> url_words("http://www.peabodylibrary.org/")
    ['peabodylibrary']
    >>> url_words("http://www.bbc.co.uk/news/world.html")
    ['bbc', 'news', 'world']
    """
    host, path = _host_and_path(url)
    labels, _ = _split_host(host)
    words = [w for label in labels for w in tokenize(label)]
    words.extend(w for w in tokenize(path) if w not in URL_STOP_WORDS)
    return words


class WordSegmenter:
    """Unigram Viterbi word segmentation, for compound host names (paper Sec. 4.1 text).

    The AOL log gives documents only as URLs, and hosts glue words together
    (``peabodylibrary``). :meth:`segment` returns the most probable split of a token under a
    unigram model: a dictionary word ``w`` has probability ``count(w) / N`` (``N`` = sum of
    counts); a run of ``L`` characters not covered by dictionary words is one unknown word of
    probability ``10 / (N * 10**L)`` (so unknown text is expensive, more so when long). A
    token found in the dictionary is kept whole when that is the most probable reading.
    Tokens shorter than ``min_length`` are never split (short names such as ``okemo`` are
    more often a name than two words). Results are memoised per token.

    Args:
        counts: word -> positive count (e.g. :func:`segmenter_counts`).
        min_length: tokens with fewer characters are returned unchanged.

    Raises:
        ConfigError: an empty dictionary, a non-positive count, or ``min_length < 2``.
    """

    __slots__ = (
        "_cache",
        "_cost",
        "_max_len",
        "_prefixes",
        "_unk_char",
        "_unk_start",
        "min_length",
    )

    def __init__(self, counts: Mapping[str, int], *, min_length: int = 6) -> None:
        if min_length < 2:
            raise ConfigError(
                f"min_length must be >= 2 (a 1-character token has no split), got {min_length}"
            )
        if not counts:
            raise ConfigError(
                "the segmentation dictionary is empty; give at least one word -> count"
            )
        bad = [(w, c) for w, c in counts.items() if not w or c <= 0]
        if bad:
            raise ConfigError(
                f"segmentation dictionary entries must be non-empty words with positive counts, "
                f"got {bad[:3]}; drop those entries"
            )
        total = float(sum(counts.values()))
        log_total = math.log(total)
        self._cost = {w: log_total - math.log(c) for w, c in counts.items()}
        self._prefixes = frozenset(w[:i] for w in counts for i in range(1, len(w) + 1))
        self._max_len = max(map(len, counts))
        self._unk_start = log_total - math.log(10.0)
        self._unk_char = math.log(10.0)
        self._cache: dict[str, tuple[str, ...]] = {}
        self.min_length = min_length

    def __repr__(self) -> str:
        return f"WordSegmenter({len(self._cost)} words, min_length={self.min_length})"

    def __contains__(self, word: str) -> bool:
        return word in self._cost

    def segment(self, token: str) -> list[str]:
        """The most probable split of ``token`` into words (``[token]`` if not split)."""
        if len(token) < self.min_length:
            return [token]
        hit = self._cache.get(token)
        if hit is None:
            hit = self._cache[token] = tuple(self._viterbi(token))
        return list(hit)

    def __call__(self, words: Iterable[str]) -> list[str]:
        """Segment every word of ``words`` and concatenate the pieces."""
        return [piece for w in words for piece in self.segment(w)]

    def _viterbi(self, s: str) -> list[str]:
        n = len(s)
        inf = math.inf
        best = [inf] * (n + 1)
        back = [0] * (n + 1)
        best[0] = 0.0
        unk, unk_from = inf, 0  # best unknown run ending at the current position
        cost, prefixes, u0, u1 = self._cost, self._prefixes, self._unk_start, self._unk_char
        for i in range(n + 1):
            if i > 0:
                start_here = best[i - 1] + u0 + u1
                if unk + u1 < start_here:
                    unk += u1
                else:
                    unk, unk_from = start_here, i - 1
                if unk < best[i]:
                    best[i], back[i] = unk, unk_from
            if i == n:
                break
            base = best[i]
            for j in range(i + 1, min(n, i + self._max_len) + 1):
                piece = s[i:j]
                if piece not in prefixes:
                    break
                c = cost.get(piece)
                if c is not None and base + c < best[j]:
                    best[j], back[j] = base + c, i
        pieces: list[str] = []
        j = n
        while j > 0:
            i = back[j]
            pieces.append(s[i:j])
            j = i
        pieces.reverse()
        return pieces


def document_words(url: str, segmenter: WordSegmenter | None = None) -> list[str]:
    """The words of a document given by its URL: :func:`url_words`, each segmented with
    ``segmenter`` when one is given (``http://www.peabodylibrary.org/`` -> ``peabody``,
    ``library``)."""
    words = url_words(url)
    return segmenter(words) if segmenter is not None else words


def segmenter_counts(
    urls: Iterable[str],
    query_tokens: Iterable[Sequence[str]],
    *,
    min_sites: int = 2,
    min_word_length: int = 2,
) -> dict[str, int]:
    """A segmentation dictionary from a document collection and a set of queries.

    Stand-in for a public word list (none is bundled with fedrank): the count of a word is
    the number of times it occurs in ``query_tokens`` (one token list per query event; by
    default the background-period queries, see
    :func:`~fedrank.data.aol.corpus.default_segmenter`) plus the number of distinct sites
    (:func:`url_site`) whose URL contains it as a word, counted only when that number is at
    least ``min_sites``. The site rule keeps compound host names such as
    ``peabodylibrary`` (one site) out of the dictionary -- they are what must be segmented --
    while words that recur across sites (``library`` in ``library.harvard.edu`` and
    ``library.yale.edu``) are kept. Words shorter than ``min_word_length`` are dropped (single
    letters would otherwise split unknown names into letters).
    """
    if min_sites < 1 or min_word_length < 1:
        raise ConfigError(
            f"min_sites and min_word_length must be >= 1, got {min_sites}, {min_word_length}"
        )
    counts: Counter[str] = Counter()
    for tokens in query_tokens:
        counts.update(tokens)
    sites: dict[str, set[str]] = {}
    for url in urls:
        site = url_site(url)
        for w in url_words(url):
            sites.setdefault(w, set()).add(site)
    for w, s in sites.items():
        if len(s) >= min_sites:
            counts[w] += len(s)
    return {w: c for w, c in counts.items() if len(w) >= min_word_length}
