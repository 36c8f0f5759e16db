# Release notes of nova-lxd-accel, built by reno's Sphinx extension.
project = 'nova-lxd-accel Release Notes'
copyright = 'nova-lxd-accel developers'
extensions = ['reno.sphinxext']
source_suffix = '.rst'
master_doc = 'index'
exclude_patterns = []
html_theme = 'alabaster'
html_static_path = ['_static']
