"""``record_metadata`` becomes a choice: nothing, denials (the new default) or every hit.

A policy that recorded (True) keeps recording every hit; one that did not (False)
now records its denials, so the offender dashboard answers who was denied out of
the box. The new field is added beside the old one, filled, then put in its place,
which works the same on every database.
"""

from django.db import migrations, models

HELP = (
    "Which requests to record the user (or IP) and path of, for the offender dashboard. "
    "Denials (the default) answer who was denied, at little cost; every hit also shows "
    "who was allowed."
)
CHOICES = [
    ("none", "Nothing"),
    ("denials", "Denials (and would-be denials in shadow mode)"),
    ("every", "Every hit"),
]


def to_choice(apps, schema_editor):
    # On the database being migrated (migrate --database), not the default one.
    policies = apps.get_model("django_ratelimits", "Policy").objects.using(
        schema_editor.connection.alias
    )
    policies.filter(record_metadata=True).update(record_who="every")
    policies.filter(record_metadata=False).update(record_who="denials")


def to_boolean(apps, schema_editor):
    policies = apps.get_model("django_ratelimits", "Policy").objects.using(
        schema_editor.connection.alias
    )
    policies.update(record_metadata=False)
    policies.filter(record_who="every").update(record_metadata=True)


class Migration(migrations.Migration):
    dependencies = [("django_ratelimits", "0003_policy_identity_budget")]

    operations = [
        migrations.AddField(
            model_name="policy",
            name="record_who",
            field=models.CharField(
                choices=CHOICES,
                default="denials",
                help_text=HELP,
                max_length=16,
                verbose_name="record who",
            ),
        ),
        migrations.RunPython(to_choice, to_boolean),
        migrations.RemoveField(model_name="policy", name="record_metadata"),
        migrations.RenameField(model_name="policy", old_name="record_who", new_name="record_metadata"),
    ]
