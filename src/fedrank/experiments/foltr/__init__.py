"""FOLtR-ES experiments (Kharitonov, WSDM 2019): training runs, baselines, plots and the
paper reproduction."""
