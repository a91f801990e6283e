"""Delivery policies (docs/DELIVERY.md), pure: what a subscription's `delivery`,
`dwell_ms`, `exit_dwell_ms` and `margin` make of the engine's pair changes.

    options     the fields as decoded and checked; a group's policy
    margin      holding within a margin (the profile widened)
    sustain     a pair's state: off, pending, on, leaving (dwell and exit dwell)
    choice      the policies' order of a group's eligible members
    layer       `Delivery`: one state key's pairs, chosen sets, timers and their log
    histograms  equi-depth histograms of live subscriptions per numeric attribute
"""
