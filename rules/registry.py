"""The rule catalogue: every `pflNNN_*.py` module in this package defines exactly one rule."""
from __future__ import annotations

import importlib
import pkgutil
import re
from functools import lru_cache
from typing import Dict, List, Optional, Tuple, Type

from perflsp.config import ConfigError, Settings
from perflsp.rules import precedence
from perflsp.rules.removed import removed_rule
from perflsp.rules.rule import Rule

_MODULE = re.compile(r"^pfl\d{3}_\w+$")


@lru_cache(maxsize=1)
def all_rules() -> Tuple[Type[Rule], ...]:
    import perflsp.rules as package

    found: Dict[str, Type[Rule]] = {}
    for info in pkgutil.iter_modules(package.__path__):
        if not _MODULE.match(info.name):
            continue
        module = importlib.import_module(f"{package.__name__}.{info.name}")
        classes = [v for v in vars(module).values()
                   if isinstance(v, type) and issubclass(v, Rule) and v is not Rule and v.__module__ == module.__name__]
        if len(classes) != 1:
            raise RuntimeError(f"{module.__name__} must define exactly one Rule, found {len(classes)}")
        rule = classes[0]
        if rule.code in found:
            raise RuntimeError(f"rule code {rule.code} is defined twice")
        if removed_rule(rule.code) is not None:
            raise RuntimeError(f"rule code {rule.code} belongs to a removed rule; codes are never reused")
        if not info.name.startswith(rule.code.lower()):
            raise RuntimeError(f"{module.__name__} defines {rule.code}; the module name must start with its code")
        found[rule.code] = rule
    return tuple(found[code] for code in sorted(found))


def rule_by_code(code: str) -> Optional[Type[Rule]]:
    return next((r for r in all_rules() if r.code == code.upper()), None)


def validate(settings: Settings) -> None:
    """Raise ConfigError for codes that name no rule and for rule options that do not exist.
    Codes of removed rules pass (`removed_warnings` warns about them)."""
    codes = {r.code for r in all_rules()}
    origin = settings.source or "settings"
    for key, selector in settings.named_codes():
        if key.startswith("rules."):
            continue  # checked with its options, below
        if not any(code.startswith(selector) for code in codes) and removed_rule(selector) is None:
            raise ConfigError(f"{origin}: `{key}` names {selector!r}, which matches no rule (see `perflsp rule --all`)")
    for code, options in settings.rule_options:
        if removed_rule(code) is not None:
            continue  # its options have no rule left to apply to
        rule = rule_by_code(code)
        if rule is None:
            raise ConfigError(f"{origin}: `rules.{code}`: no such rule")
        for name, value in options:
            option = rule.options.get(name)
            if option is None:
                known = ", ".join(sorted(rule.options)) or "none"
                raise ConfigError(f"{origin}: `rules.{code}.{name}`: {code} has no option {name!r} (options: {known})")
            if not option.check(value):
                raise ConfigError(f"{origin}: `rules.{code}.{name}` must be a {type(option.default).__name__}, got {value!r}")


def _available(rule: Type[Rule], settings: Settings) -> bool:
    """Preview rules exist only in preview mode, however they are selected (Ruff's rule)."""
    return settings.preview or not rule.preview


@lru_cache(maxsize=64)
def enabled_rules(settings: Settings, path: Optional[str] = None) -> List[Rule]:
    validate(settings)
    return [rule(settings.options_for(rule.code)) for rule in all_rules()
            if _available(rule, settings) and settings.is_enabled(rule.code, path)]


@lru_cache(maxsize=64)
def outranking_rules(settings: Settings, path: Optional[str] = None) -> List[Rule]:
    """Rules that run although they are not enabled: a finding of theirs silences an enabled
    rule's finding on the same expression (see `precedence`)."""
    enabled = {rule.code for rule in enabled_rules(settings, path)}
    wanted = precedence.winners_over(enabled) - enabled
    return [rule(settings.options_for(rule.code)) for rule in all_rules()
            if rule.code in wanted and _available(rule, settings)]


def preview_warnings(settings: Settings) -> List[str]:
    """Ruff's warning for a `select` entry that names only preview rules while preview is off."""
    if settings.preview:
        return []
    warnings = []
    for selector in settings.select + settings.extend_select:
        matched = [rule for rule in all_rules() if rule.code.startswith(selector)]
        if matched and all(rule.preview for rule in matched):
            warnings.append(f"Selection `{selector}` has no effect because preview is not enabled "
                            "(set `preview = true` or pass `--preview`)")
    return warnings

