"""What the energy cost: kWh always, money and CO2e where the user gives a price and a grid's carbon
intensity (ini ``energy_price_per_kwh``, ``energy_carbon_g_per_kwh``, or the command's options).

As CodeCarbon and perun do for whole runs, CO2e is energy times the grid's intensity (g CO2e per kWh)
and cost is energy times the price per kWh; the plugin knows neither (they depend on the site and the
hour), so it shows them only when told. The energy is the GPU's in the measured regions: every call
of every repetition of the cases read (not the host's, nor the GPU's between tests).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from ..errors import SettingError
from ..reports.numbers import JOULES_PER_KWH, kwh_text


@dataclass(frozen=True)
class Tariff:
    """The price of a kWh (in the user's currency) and the grid's g CO2e per kWh; None: not given."""

    price_per_kwh: float | None = None
    carbon_g_per_kwh: float | None = None

    def cost(self, energy_j: float) -> float | None:
        return None if self.price_per_kwh is None else kwh(energy_j) * self.price_per_kwh

    def carbon_g(self, energy_j: float) -> float | None:
        return None if self.carbon_g_per_kwh is None else kwh(energy_j) * self.carbon_g_per_kwh

    def describe(self, energy_j: float) -> str:
        """``0.00123 kWh, cost 0.000369, 0.47 g CO2e``: the parts that are known."""
        parts = [kwh_text(energy_j)]
        cost = self.cost(energy_j)
        if cost is not None:
            parts.append(f"cost {cost:.3g}")
        carbon = self.carbon_g(energy_j)
        if carbon is not None:
            parts.append(f"{carbon_text(carbon)} CO2e")
        return ", ".join(parts)

    def data(self, energy_j: float) -> dict[str, float | None]:
        """The JSON form of an amount of energy: joules, kWh, cost and grams of CO2e (null when not given)."""
        return {"energy_j": energy_j, "energy_kwh": kwh(energy_j), "cost": self.cost(energy_j),
                "co2e_g": self.carbon_g(energy_j)}


def kwh(energy_j: float) -> float:
    return energy_j / JOULES_PER_KWH


def carbon_text(grams: float) -> str:
    return f"{grams / 1000:.3g} kg" if grams >= 1000 else f"{grams:.3g} g"


def tariff_value(text: object, name: str) -> float | None:
    """A price or an intensity as typed (``0.30``), or None when empty; anything else is a ``SettingError``."""
    if text is None or (isinstance(text, str) and not text.strip()):
        return None
    try:
        value = float(str(text).strip())
    except ValueError:
        raise SettingError(f"{name}={text!r} is not a number; give it per kWh, e.g. {name}=0.30") from None
    if not math.isfinite(value) or value < 0 or value > 1e6:
        raise SettingError(f"{name}={text!r} must be a number from 0 to 1e6 per kWh")
    return value
