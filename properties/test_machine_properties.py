"""The machine's stateful properties (see fleet_model.py for the rules and invariants)."""

from __future__ import annotations

from fleet_model import FleetModel

TestFleet = FleetModel.TestCase
