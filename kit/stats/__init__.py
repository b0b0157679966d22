"""The kit's statistics, pure functions on tables and tensors that present nothing (an import
contract keeps the report and plotting out): a claim's primary endpoint in three outcomes
(`outcomes`), the secondary task-by-task verdicts (`verdicts`), the statement over a budget
sweep (`crossover`), a claim judged round by round (`rounds`) by the group-sequential rule
(`sequential`) on its alpha-spending boundaries (`spending`), the simulation that checks its
error rates and power (`simulation`), the `rounds` block of a notebook's parameters
(`settings`), and label-free diagnostics of representations (`diagnostics`: RankMe, alpha-ReQ,
linear CKA)."""
