"""FedPS experiments (Yao et al.): the AOL data, candidate lists, every mode of Tables 2-3,
continuous updating and the paper reproduction."""
