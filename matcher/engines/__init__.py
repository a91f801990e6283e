"""String matching engines of the filter language (docs/SELECTORS.md, "Pattern tests").

`patterns` defines the four tests (MATCHES, TOPIC, HAS, XPATH) on one value;
`regex_set`, `topic_trie`, `tag_index` and `xpath_groups` each match one value
against every pattern of one attribute at once; `pattern_index` puts them
together per space, and `gated` keeps the subscriptions whose filters hold
such tests: the rest of each filter in a covering forest, the tests indexed.
"""
