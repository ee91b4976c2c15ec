from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('diagnosis', '0002_insights'),
    ]

    operations = [
        migrations.AddField(
            model_name='diagnosisrun',
            name='purpose',
            field=models.CharField(choices=[('diagnosis', 'Diagnosis'), ('gate', 'CI gate')], default='diagnosis',
                                   max_length=20),
        ),
    ]
