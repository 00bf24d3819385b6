"""Query parameters of list endpoints are checked, never silently ignored.

The API's default pagination, ordering, search and filter backends here answer 400 with
the error body for a value the schema does not allow (``limit=abc``, ``offset=-1``,
``ordering=nosuchfield``, ``paused=maybe``) and for a parameter the list does not take,
and declare their bounds in the schema.
"""

from __future__ import annotations

from django import forms
from django_filters import rest_framework as filters
from rest_framework import exceptions
from rest_framework.filters import OrderingFilter, SearchFilter
from rest_framework.pagination import LimitOffsetPagination

MAX_LIMIT = 500
MAX_OFFSET = 10**9
MAX_SEARCH = 200
ALWAYS_ALLOWED = {"format"}


def _bounded_int(request, name: str, default: int, low: int, high: int) -> int:
    raw = request.query_params.get(name)
    if raw is None:
        return default
    if not raw.isdigit() or not low <= int(raw) <= high:
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
        fields = [name for name, _ in self.get_valid_fields(view.get_queryset(), view)]
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
    field_class = StrictBooleanField


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


def reject_unknown(request, view, filter_names: set[str]) -> None:
    """400 for a query parameter that neither the filters, the ordering and search
    backends nor the paginator of ``view`` take."""
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
    """The query parameters checked by ``serializer_class``: 400 for invalid values and for
    parameters it does not declare."""
    query = serializer_class(data=request.query_params)
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
