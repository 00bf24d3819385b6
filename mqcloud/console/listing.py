"""Paging, search, sorting and filters of every console list, read from the query string.

A list declares a :class:`ListSpec` (its sortable columns, searched fields and filters);
:func:`paginate` reads ``?page=&q=&sort=&<filter>=`` from the request, validates every
value and answers one page. Nothing a user types reaches the database unchecked: a sort
names a whitelisted column (else the default), a filter value is one of its choices or a
bounded string matched exactly (else no filter), the search is bounded and parameterized,
and a page number that is not one (``abc``, ``-1``, ``999999``) gives the first or the last
page — never an error. The URL keeps the whole state, so a list view is bookmarkable and
back/forward works; htmx swaps only the list (``templates/console/partials/listing_*``).

Several lists on one page (the app page's producers and consumers) take a ``prefix``:
``p_page``, ``p_q``, … so each keeps its own state in the same URL.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import reduce
from operator import or_
from typing import Any

from django.core.paginator import Page, Paginator
from django.db.models import Q, QuerySet
from django.http import HttpRequest, QueryDict

MAX_TEXT = 200
PER_PAGE = 50


def clean_text(raw: str | None) -> str:
    """A search or filter value as typed: trimmed, at most MAX_TEXT characters, no NUL."""
    return (raw or "").replace("\x00", "").strip()[:MAX_TEXT]


@dataclass(frozen=True)
class Filter:
    """One filter of a list.

    ``lookup``: the field matched exactly by a free value (``team__name``); ``choices``:
    the allowed values and their labels (a value outside them means no filter);
    ``states``: values mapped to conditions (``state=paused`` → ``Q(paused=True)``), or to
    functions making the condition when the list is read (one that depends on the time).
    """

    param: str
    label: str
    lookup: str = ""
    choices: tuple[tuple[str, str], ...] = ()
    states: Mapping[str, Q | Callable[[], Q]] = field(default_factory=dict)

    def allowed(self, value: str, choices: Sequence[tuple[str, str]]) -> bool:
        if self.states:
            return value in self.states
        if choices:
            return value in {v for v, _ in choices}
        return True

    def condition(self, value: str) -> Q:
        if self.states:
            condition = self.states[value]
            return condition if isinstance(condition, Q) else condition()
        return Q(**{self.lookup: value})


@dataclass(frozen=True)
class ListSpec:
    """What a list may be sorted by, searched in and filtered on.

    ``sorts`` maps a public column key to the fields it orders by; ``default_sort`` is a
    key, ``-`` in front for descending. A unique ``tiebreak`` ends every ordering, so
    pages never overlap.
    """

    sorts: Mapping[str, Sequence[str]]
    default_sort: str
    search: Sequence[str] = ()
    filters: Sequence[Filter] = ()
    per_page: int = PER_PAGE
    prefix: str = ""
    search_label: str = "Search"
    tiebreak: str = "pk"

    def param(self, name: str) -> str:
        return f"{self.prefix}{name}"


@dataclass(frozen=True)
class Query:
    """The validated state of one list."""

    q: str
    sort: str
    filters: dict[str, str]
    page: str

    @property
    def sort_key(self) -> str:
        return self.sort.lstrip("-")

    @property
    def descending(self) -> bool:
        return self.sort.startswith("-")


def parse(
    params: QueryDict, spec: ListSpec, choices: Mapping[str, Sequence[tuple[str, str]]] = {}
) -> Query:
    """The list state in ``params``, every value validated (invalid ones dropped)."""
    sort = params.get(spec.param("sort"), "")
    if sort.lstrip("-") not in spec.sorts or sort.count("-") > 1:
        sort = spec.default_sort
    filters = {}
    for f in spec.filters:
        value = clean_text(params.get(spec.param(f.param)))
        if value and f.allowed(value, choices.get(f.param, f.choices)):
            filters[f.param] = value
    q = clean_text(params.get(spec.param("q"))) if spec.search else ""
    page = params.get(spec.param("page"), "1").strip()[:12]
    if page.isascii() and page.lstrip("-").isdigit() and int(page) < 1:
        page = "1"  # page 0 or -3: the first page (past the end: the last, by the paginator)
    return Query(q=q, sort=sort, filters=filters, page=page)


def order(spec: ListSpec, query: Query) -> list[str]:
    """The ``order_by`` terms of the query's sort, ending with the tiebreak."""
    sign = "-" if query.descending else ""
    terms = []
    for name in spec.sorts[query.sort_key]:
        if name.startswith("-"):
            terms.append(name[1:] if sign else name)
        else:
            terms.append(sign + name)
    return [*terms, sign + spec.tiebreak]


def narrow(queryset: QuerySet, spec: ListSpec, query: Query) -> QuerySet:
    """``queryset`` searched and filtered (not ordered)."""
    if query.q and spec.search:
        queryset = queryset.filter(
            reduce(or_, (Q(**{f"{name}__icontains": query.q}) for name in spec.search))
        )
    for f in spec.filters:
        if f.param in query.filters:
            queryset = queryset.filter(f.condition(query.filters[f.param]))
    return queryset


@dataclass
class Listing:
    """One page of a list with everything its controls need."""

    spec: ListSpec
    query: Query
    page: Page
    params: QueryDict
    path: str
    choices: dict[str, Sequence[tuple[str, str]]]

    @property
    def rows(self) -> list[Any]:
        return list(self.page.object_list)

    @property
    def id(self) -> str:
        return f"list-{self.spec.prefix.rstrip('_') or 'main'}"

    @property
    def total(self) -> int:
        return self.page.paginator.count

    def url(self, **changes: object) -> str:
        """This URL with the list's parameters changed (None or '' removes one); changing
        anything but the page goes back to page 1. Other lists' parameters are kept."""
        params = self.params.copy()
        if "page" not in changes:
            params.pop(self.spec.param("page"), None)
        for name, value in changes.items():
            key = self.spec.param(name)
            if value in (None, "") or (name == "page" and value == 1):
                params.pop(key, None)
            else:
                params[key] = str(value)
        encoded = params.urlencode()
        return f"{self.path}?{encoded}" if encoded else self.path

    def page_url(self, number: int) -> str:
        return self.url(page=number)

    def pager(self) -> dict[str, str]:
        """URLs of the first, previous, next and last pages ('' where there is none)."""
        page, last = self.page, self.page.paginator.num_pages
        return {
            "first": self.page_url(1) if page.number > 1 else "",
            "previous": self.page_url(page.number - 1) if page.has_previous() else "",
            "next": self.page_url(page.number + 1) if page.has_next() else "",
            "last": self.page_url(last) if page.number < last else "",
        }

    def sort_url(self, key: str) -> str:
        """Sort by ``key``; the current column toggles its direction."""
        if self.query.sort_key == key:
            return self.url(sort=key if self.query.descending else f"-{key}")
        return self.url(sort=key)

    def sort_state(self, key: str) -> str:
        """``ascending``/``descending`` for the sorted column (aria-sort), else ''."""
        if self.query.sort_key != key:
            return ""
        return "descending" if self.query.descending else "ascending"

    def hidden(self) -> list[tuple[str, str]]:
        """Parameters a list's search form carries along unchanged: other lists' state
        and this list's sort (the form itself sends q and the filters)."""
        own = {self.spec.param(n) for n in ("q", "page")} | {
            self.spec.param(f.param) for f in self.spec.filters
        }
        return [(k, v) for k, v in self.params.items() if k not in own]

    def filter_fields(self) -> list[dict[str, Any]]:
        return [
            {
                "name": self.spec.param(f.param),
                "label": f.label,
                "value": self.query.filters.get(f.param, ""),
                "choices": list(f.states and [(k, k) for k in f.states])
                or list(self.choices.get(f.param, f.choices)),
            }
            for f in self.spec.filters
        ]

    @property
    def filtered(self) -> bool:
        return bool(self.query.q or self.query.filters)

    def clear_url(self) -> str:
        return self.url(q=None, **{f.param: None for f in self.spec.filters})


def paginate(
    request: HttpRequest,
    queryset: QuerySet,
    spec: ListSpec,
    *,
    choices: Mapping[str, Sequence[tuple[str, str]]] | None = None,
    ordered: bool = False,
) -> Listing:
    """One page of ``queryset`` searched, filtered and sorted as the request asks.

    ``ordered``: the queryset is ordered already (e.g. by an annotation the caller chose
    from :func:`parse`'s sort); otherwise the spec's sort is applied.
    """
    choices = dict(choices or {})
    query = parse(request.GET, spec, choices)
    rows = narrow(queryset, spec, query)
    if not ordered:
        rows = rows.order_by(*order(spec, query))
    page = Paginator(rows, spec.per_page).get_page(query.page)
    return Listing(spec, query, page, request.GET, request.path, choices)


def page_of(request: HttpRequest, rows: Sequence[Any], spec: ListSpec, text: Any = str) -> Listing:
    """A page of rows computed in memory (not a queryset), with the same controls: the
    search keeps rows whose ``text(row)`` contains it (no sorting or filters)."""
    query = parse(request.GET, spec)
    if query.q:
        needle = query.q.lower()
        rows = [r for r in rows if needle in text(r).lower()]
    page = Paginator(rows, spec.per_page).get_page(query.page)
    return Listing(spec, query, page, request.GET, request.path, {})
