"""The versions Neutron and Keystone are installed with (pip constraints), besides the three pinned in
:data:`metal3_ipam.testing.openstack.REQUIREMENTS`.

Taken from ``pip freeze`` of a working install (Python 3.11, the tests green), so that a fresh
machine gets the same set and a release of one of the hundred-odd dependencies does not change
what the tests run against. To move them: install without constraints, run the OpenStack tests,
and paste ``pip freeze`` (``installed.txt`` in the cache) here.
"""

CONSTRAINTS = tuple("""
alembic==1.20.1 amqp==5.4.2 aniso8601==10.0.1 attrs==26.1.0 autopage==0.6.0 bcrypt==5.0.0
blinker==1.9.0 cachetools==8.0.2 certifi==2026.10.19.post1 cffi==2.1.1 charset-normalizer==3.5.3
click==8.5.1 cliff==4.17.0 cmd2==4.3.1 cotyledon==2.2.0 cryptography==50.0.2 debtcollector==3.1.0
decorator==5.3.1 defusedxml==0.7.1 dnspython==2.9.2 dogpile.cache==1.5.0 elementpath==4.8.0
eventlet==0.41.3 fasteners==0.20 fixtures==4.3.2 Flask-RESTful==0.3.10 Flask==3.1.3 futurist==3.5.0
greenlet==3.5.6 httplib2==0.32.1 idna==3.20 invoke==3.0.3 iso8601==2.1.0 itsdangerous==2.2.0
Jinja2==3.1.6 jmespath==1.1.0 jsonpatch==1.48 jsonpointer==3.12 jsonschema-specifications==2025.9.1
jsonschema==4.26.0 keystoneauth1==5.18.1 keystonemiddleware==13.0.1 kombu==5.7.0 lxml==6.1.3
Mako==1.4.3 markdown-it-py==4.3.0 MarkupSafe==3.0.4 mdurl==0.1.2 msgpack==1.2.4 ncclient==0.7.1
netaddr==1.3.0 neutron-lib==5.0.1 oauthlib==4.0.1 openstacksdk==4.22.0 os-ken==4.2.2
os-resource-classes==1.1.0 os-service-types==1.9.0 os-traits==3.9.0 os_vif==5.3.0 osc-lib==4.7.0
oslo.cache==4.3.0 oslo.concurrency==7.6.1 oslo.config==10.7.0 oslo.context==6.5.0 oslo.db==18.1.1
oslo.i18n==6.9.0 oslo.log==8.3.2 oslo.messaging==18.3.1 oslo.metrics==0.17.0 oslo.middleware==8.2.0
oslo.policy==6.0.1 oslo.privsep==3.12.0 oslo.reports==3.9.0 oslo.rootwrap==7.10.0
oslo.serialization==5.11.0 oslo.service==4.8.0 oslo.upgradecheck==2.8.0 oslo.utils==10.2.0
oslo.versionedobjects==3.12.0 osprofiler==4.4.0 ovs==4.0.0 ovsdbapp==3.0.0 packaging==26.4
paramiko==5.1.0 Paste==3.10.1 PasteDeploy==3.1.0 pbr==7.1.3 pecan==1.8.0 platformdirs==4.14.8
prettytable==3.18.0 prometheus_client==0.26.0 prompt_toolkit==3.0.53 psutil==7.2.2 pycadf==4.1.0
pycparser==3.12 Pygments==2.21.0 PyJWT==2.15.1 PyNaCl==1.6.2 pyOpenSSL==26.4.0 pyparsing==3.3.3
pyperclip==1.11.0 pyroute2==0.9.7 pysaml2==7.5.5 python-dateutil==4.0.0
python-designateclient==7.0.0 python-keystoneclient==6.0.0 python-novaclient==18.13.1 pytz==2026.6
PyYAML==6.0.4 referencing==0.37.0 repoze-lru==0.8 requests==2.34.2 rfc3986==2.0.0
rich-argparse==1.8.0 rich==15.0.0 Routes==2.5.1 rpds-py==2026.9.1 setproctitle==1.3.8 six==1.17.0
sortedcontainers==2.4.0 SQLAlchemy==2.1.9 statsd==4.0.1 stevedore==5.10.0 tenacity==9.2.1
testresources==2.1.2 testscenarios==0.7.0 tooz==9.1.0 typing_extensions==4.16.0 tzdata==2026.6
urllib3==2.8.0 vine==5.1.0 voluptuous==0.16.0 wcwidth==0.9.4 WebOb==1.8.11 Werkzeug==3.1.9
wrapt==2.5.2 xmlschema==2.5.1 yappi==1.7.6
""".split())
