"""The machine's rules (SPEC.md §3), one file per rule or per few rules of one section.

    [hit]                                     test_hit.py
    [join] [wait-unload]                      test_join.py
    [cold] [evict]                            test_evict.py
    [load-outcome] [unload-outcome], the wire test_outcomes.py
    [settle]                                  test_settle.py
    [release]                                 test_release.py
    [cancel]                                  test_cancel.py
    [time] [listing]                          test_listing.py
    [forget]                                  test_forget.py
    [replicas]                                test_replicas.py
    [health] [blame] [refuse]                 test_health.py
    [cap]                                     test_cap.py
    [pin] [warm]                              test_pin.py
    [view] [statistics] [order]               test_queries.py
    [load] [place]                            test_place.py
    [reading] [read-failed]                   test_reading.py
    [share]                                   test_share.py
    [read]                                    test_read.py
    [route]                                   test_route.py
    the points SPEC once left open            test_spec_points.py
    the points SPEC left to the porter        test_porter_points.py
    readings of §3.8-3.15 pinned (issue 37)   test_pinned_readings.py

A test's name starts with its rule (``test_listing_...``), and the Go seed's known faults
(../shared/seed/NOTES.md, 1 to 7) are ``test_fault_N_...`` under the rule each breaks. Every test here
is a hand conformance vector, named for the test (vectors/generate.py, which reads the rule from the
name), except those generate.py's ``NOT_VECTORS`` lists: ``place_hit()`` and the edges of the rules,
where a small slip in the Python machine would pass every other scenario (never recorded). Usage
errors are tests/test_usage_errors.py's.
"""
