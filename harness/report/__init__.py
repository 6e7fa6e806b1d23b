"""Reports of verified runs: what a run contributes (`summary`), the JSON
report (`data`), its views (`tables`, `markdown`, `terminal`, `chart`,
`files`), table sizes (`sizes`), the baseline gate (`baseline`) and the
README's generated figures (`figures`)."""
