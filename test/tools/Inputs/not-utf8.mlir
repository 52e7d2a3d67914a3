module {ÿ}
