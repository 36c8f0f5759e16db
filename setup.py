import setuptools

# pbr reads metadata from setup.cfg. The package list is given here because
# pbr's [files] packages cannot name a sub-package of a distribution it does
# not own (nova.virt.lxd_accel, the shim nova loads the driver through).
setuptools.setup(
    pbr=True,
    packages=setuptools.find_packages(include=[
        'nova_lxd_accel', 'nova_lxd_accel.*',
        'nova_lxd_accel_dashboard', 'nova_lxd_accel_dashboard.*']) +
    ['nova.virt.lxd_accel'])
