"""Query parameters of list endpoints are checked, never silently ignored.

The API's default pagination, ordering, search and filter backends here answer 400 with
the error body for a value the schema does not allow (``limit=abc``, ``offset=-1``,
``ordering=nosuchfield``, ``paused=maybe``), for a parameter the list does not take and
for one given twice, and declare their bounds in the schema. Query serializers
(:func:`validated_query`) read the parameters as given: an empty value is a value (and
so a 400 where the schema allows none), not HTML-form "left blank".
"""

from __future__ import annotations

from django import forms
from django_filters import rest_framework as filters
from drf_spectacular.utils import extend_schema_field
from rest_framework import exceptions
from rest_framework.filters import OrderingFilter, SearchFilter
from rest_framework.pagination import LimitOffsetPagination

MAX_LIMIT = 500
MAX_OFFSET = 10**9
MAX_SEARCH = 200
MAX_ID = 2**63 - 1
ALWAYS_ALLOWED = {"format"}


def _bounded_int(request, name: str, default: int, low: int, high: int) -> int:
    raw = request.query_params.get(name)
    if raw is None:
        return default
    if not (raw.isascii() and raw.isdigit()) or not low <= int(raw) <= high:
        raise exceptions.ValidationError({name: [f"A whole number from {low} to {high}."]})
    return int(raw)


class StrictLimitOffsetPagination(LimitOffsetPagination):
    """``limit`` 1–500 (default 50), ``offset`` 0–10^9; anything else is a 400."""

    default_limit = 50
    max_limit = MAX_LIMIT

    def get_limit(self, request) -> int:
        return _bounded_int(request, self.limit_query_param, self.default_limit, 1, MAX_LIMIT)

    def get_offset(self, request) -> int:
        return _bounded_int(request, self.offset_query_param, 0, 0, MAX_OFFSET)

    def get_schema_operation_parameters(self, view) -> list[dict]:
        params = super().get_schema_operation_parameters(view)
        bounds = {self.limit_query_param: (1, MAX_LIMIT), self.offset_query_param: (0, MAX_OFFSET)}
        for param in params:
            low, high = bounds[param["name"]]
            param["schema"].update({"minimum": low, "maximum": high})
        return params


class StrictOrderingFilter(OrderingFilter):
    """``ordering`` must name the view's ordering fields (comma-separated, ``-`` for
    descending); the schema lists them."""

    def _choices(self, view) -> list[str]:
        """The allowed values; a view that lists its ``ordering_fields`` needs no queryset
        (schema generation has no user to scope one by)."""
        explicit = isinstance(getattr(view, "ordering_fields", None), list | tuple)
        queryset = None if explicit else view.get_queryset()
        fields = [name for name, _ in self.get_valid_fields(queryset, view)]
        return [*fields, *(f"-{name}" for name in fields)]

    def get_ordering(self, request, queryset, view):
        raw = request.query_params.get(self.ordering_param)
        if raw is not None:
            allowed = {name for name, _ in self.get_valid_fields(queryset, view)}
            terms = [t.strip() for t in raw.split(",")]
            if not all(t.lstrip("-") in allowed for t in terms):
                raise exceptions.ValidationError(
                    {self.ordering_param: [f"One or more of: {', '.join(sorted(allowed))}."]}
                )
        return super().get_ordering(request, queryset, view)

    def get_schema_operation_parameters(self, view) -> list[dict]:
        params = super().get_schema_operation_parameters(view)
        try:
            choices = self._choices(view)
        except Exception:  # schema generation without a request
            choices = []
        for param in params:
            if choices:
                param["schema"] = {"type": "string", "enum": choices}
        return params


class StrictSearchFilter(SearchFilter):
    """``search`` of at most 200 characters."""

    def get_search_terms(self, request) -> list[str]:
        raw = request.query_params.get(self.search_param, "")
        if len(raw) > MAX_SEARCH or "\x00" in raw:
            raise exceptions.ValidationError(
                {self.search_param: [f"At most {MAX_SEARCH} characters, no NUL."]}
            )
        return super().get_search_terms(request)

    def get_schema_operation_parameters(self, view) -> list[dict]:
        params = super().get_schema_operation_parameters(view)
        for param in params:
            param["schema"]["maxLength"] = MAX_SEARCH
        return params


class StrictBooleanField(forms.TypedChoiceField):
    """``true`` or ``false`` (also ``True``/``False``/``1``/``0``); nothing else."""

    def __init__(self, *args, **kwargs) -> None:
        kwargs.pop("empty_value", None)
        super().__init__(
            *args,
            choices=[(v, v) for v in ("true", "false", "True", "False", "1", "0")],
            coerce=lambda v: v in ("true", "True", "1"),
            **kwargs,
        )


class StrictBooleanFilter(filters.BooleanFilter):
    """A boolean filter that sees the value as given: django-filter's ``BooleanWidget``
    turns anything but true/false into "no filter", so ``paused=maybe`` listed all."""

    field_class = StrictBooleanField

    def __init__(self, *args, **kwargs) -> None:
        kwargs.setdefault("widget", forms.TextInput)
        super().__init__(*args, **kwargs)


@extend_schema_field({"type": "integer", "minimum": 0, "maximum": MAX_ID})
class IdFilter(filters.NumberFilter):
    """An object id: any whole number filters (one that names nothing lists nothing),
    where a model-choice filter answers 400 for an id that does not exist."""

    field_class = forms.IntegerField

    def __init__(self, *args, **kwargs) -> None:
        kwargs.setdefault("min_value", 0)
        kwargs.setdefault("max_value", MAX_ID)
        super().__init__(*args, **kwargs)


class StrictFilterSet(filters.FilterSet):
    """django-filter's FilterSet whose boolean filters refuse values other than true/false."""

    FILTER_DEFAULTS = {
        **filters.FilterSet.FILTER_DEFAULTS,
        **{
            field: {"filter_class": StrictBooleanFilter}
            for field in filters.FilterSet.FILTER_DEFAULTS
            if field.__name__ == "BooleanField"
        },
    }


class StrictDjangoFilterBackend(filters.DjangoFilterBackend):
    """django-filter's backend with strict booleans, and no unknown parameters on lists."""

    filterset_base = StrictFilterSet

    def filter_queryset(self, request, queryset, view):
        if getattr(view, "action", None) == "list":
            filterset = self.get_filterset_class(view, queryset)
            reject_unknown(request, view, set(filterset.base_filters) if filterset else set())
        return super().filter_queryset(request, queryset, view)


def reject_repeated(request) -> None:
    """400 for a query parameter given more than once: every parameter takes one value."""
    repeated = sorted(
        name for name in request.query_params if len(request.query_params.getlist(name)) > 1
    )
    if repeated:
        raise exceptions.ValidationError(
            {name: ["Given more than once; it takes one value."] for name in repeated}
        )


def reject_unknown(request, view, filter_names: set[str]) -> None:
    """400 for a query parameter that neither the filters, the ordering and search
    backends nor the paginator of ``view`` take, and for one given twice."""
    reject_repeated(request)
    known = ALWAYS_ALLOWED | filter_names
    for backend in view.filter_backends:
        for attr in ("ordering_param", "search_param"):
            if hasattr(backend, attr):
                known.add(getattr(backend, attr))
    paginator = getattr(view, "paginator", None)
    for attr in ("limit_query_param", "offset_query_param"):
        if paginator is not None and hasattr(paginator, attr):
            known.add(getattr(paginator, attr))
    unknown = sorted(set(request.query_params) - known)
    if unknown:
        raise exceptions.ValidationError(
            {
                name: [f"Not a parameter of this list (it takes {', '.join(sorted(known))})."]
                for name in unknown
            }
        )


def validated_query(serializer_class: type, request) -> dict:
    """The query parameters checked by ``serializer_class``: 400 for invalid values, for
    parameters it does not declare and for one given twice. The serializer gets a plain
    dict, so an empty value is checked as one (DRF reads a QueryDict as an HTML form,
    where an empty field means absent)."""
    reject_repeated(request)
    query = serializer_class(
        data={name: request.query_params[name] for name in request.query_params}
    )
    query.is_valid(raise_exception=True)
    unknown = sorted(set(request.query_params) - set(query.fields) - ALWAYS_ALLOWED)
    if unknown:
        raise exceptions.ValidationError(
            {
                name: [f"Not a parameter here (it takes {', '.join(sorted(query.fields))})."]
                for name in unknown
            }
        )
    return query.validated_data
