# ruff: noqa: E501  (a text bank: one natural sentence per line reads better than wrapped strings)
"""German (de) text bank of the sample corpus."""

TOPICS = {
    "travel": [
        "Der Nachtzug von Zürich nach Wien fährt kurz nach neun Uhr ab und kommt pünktlich zum Frühstück an.",
        "Viele Reisende unterschätzen, wie kalt es auf einem Bergpass werden kann, selbst mitten im Sommer.",
        "Die Altstadt ist so klein, dass man sie an einem einzigen Nachmittag zu Fuß erkunden kann.",
        "Wir haben eine einfache Pension am Hafen gebucht und sind vom Geräusch der Fischerboote aufgewacht.",
        "Ein regionaler Bahnpass ist oft günstiger als ein Einzelfahrschein für jede Fahrt.",
        "Die Überfahrt mit der Fähre dauert etwa zwei Stunden, und bei klarem Wetter sieht man die Inseln vom Deck aus.",
        "Am Sonntag fahren die Busse seltener, deshalb lohnt sich ein Blick in den Fahrplan.",
        "Der Wanderweg steigt gleichmäßig durch Lärchenwälder an, bevor er sich zu einer weiten Alpwiese öffnet.",
        "Wer außerhalb der Hauptsaison reist, trifft auf weniger Menschen und zahlt weniger für die Unterkunft.",
        "Das kleine Museum neben dem Bahnhof erzählt die Geschichte des Tals und seiner Bewohner.",
        "Nach einem langen Tag in der Stadt saßen wir auf der Terrasse und sahen zu, wie die Sonne über dem See unterging.",
        "Es ist ratsam, etwas Bargeld dabeizuhaben, denn nicht jede Berghütte akzeptiert Karten.",
    ],
    "cooking": [
        "Den Teig mindestens zehn Minuten kneten, bis er glatt und elastisch ist.",
        "Eine Prise Salz bringt die Süße reifer Tomaten zur Geltung.",
        "Die Suppe schmeckt am zweiten Tag noch besser, wenn sich die Aromen verbunden haben.",
        "Die Nüsse kurz in einer trockenen Pfanne rösten, bis sie zu duften beginnen.",
        "Für eine leichtere Sauce ersetzt man die Hälfte der Sahne durch Gemüsebrühe.",
        "Das Fleisch vor dem Anschneiden einige Minuten ruhen lassen, damit der Saft darin bleibt.",
        "Frische Kräuter gibt man erst ganz am Schluss dazu, sonst verlieren sie ihr Aroma.",
        "Meine Großmutter hat jeden Samstagmorgen Brot gebacken, und das ganze Haus duftete herrlich.",
        "Kartoffeln, Zwiebeln und etwas Käse genügen für ein wärmendes Essen im Winter.",
        "Der Kuchen ist fertig, wenn an einem Holzstäbchen, das man in die Mitte sticht, kein Teig mehr klebt.",
        "Saisonales Gemüse vom Markt ist meistens frischer und günstiger als das aus dem Supermarkt.",
        "Die Nudeln in reichlich Salzwasser kochen und abgießen, solange sie noch bissfest sind.",
    ],
    "science": [
        "Wasser dehnt sich beim Gefrieren aus, deshalb schwimmt das Eis auf der Oberfläche der Seen.",
        "Pflanzen nutzen das Sonnenlicht, um aus Kohlendioxid und Wasser Zucker und Sauerstoff herzustellen.",
        "Die Forschenden haben die Temperatur des Gletschers drei Jahre lang in verschiedenen Tiefen gemessen.",
        "Das Licht der Sonne braucht etwas mehr als acht Minuten, bis es die Erde erreicht.",
        "Impfungen trainieren das Immunsystem, einen Erreger zu erkennen, bevor es zu einer echten Infektion kommt.",
        "Das Experiment wurde mehrmals wiederholt, um sicherzustellen, dass die Ergebnisse zuverlässig sind.",
        "Bienen zeigen einander mit einem besonderen Tanz, wo sie Blüten finden.",
        "Schall breitet sich im Wasser viel schneller aus als in der Luft.",
        "Das menschliche Gehirn enthält Milliarden von Nervenzellen, die in komplexen Netzwerken verbunden sind.",
        "Erdbeben entstehen, wenn sich tektonische Platten plötzlich entlang einer Verwerfung verschieben.",
        "Eine gute wissenschaftliche Theorie macht Vorhersagen, die man durch Beobachtung überprüfen kann.",
        "Mit dem neuen Teleskop können Astronomen Galaxien beobachten, die kurz nach dem Urknall entstanden sind.",
    ],
    "local_news": [
        "Der Gemeinderat hat am Dienstagabend das Budget für die Renovierung der Primarschule genehmigt.",
        "Die Bauarbeiten an der Hauptstraße dauern noch bis Ende Oktober.",
        "Mehr als zweihundert Freiwillige haben am vergangenen Wochenende das Flussufer gereinigt.",
        "Der Wochenmarkt zieht ab nächstem Monat auf den Platz vor der Kirche um.",
        "Die Gemeindebibliothek hat ihre Öffnungszeiten verlängert und ist nun auch am Samstagnachmittag geöffnet.",
        "Die Einwohnerinnen und Einwohner wurden zu einer öffentlichen Versammlung über den geplanten Radweg eingeladen.",
        "Die Feuerwehr musste während des Sturms zweimal ausrücken, um umgestürzte Bäume zu entfernen.",
        "Das Dorf feierte die Wiedereröffnung der renovierten Brücke mit Musik und einem kleinen Fest.",
        "Eine neue Buslinie verbindet künftig die Außenquartiere mit dem Bahnhof.",
        "Der Bürgermeister dankte allen Vereinen für ihren Einsatz für die Gemeinschaft.",
        "Das Schwimmbad bleibt diesen Sommer wegen dringender Reparaturen geschlossen.",
        "Eltern haben Unterschriften für einen sicheren Fußgängerstreifen vor dem Kindergarten gesammelt.",
    ],
    "technology": [
        "Regelmäßige Software-Updates schließen Sicherheitslücken, die Angreifer sonst ausnutzen könnten.",
        "Ein sicheres Passwort sollte lang sein und nie für mehr als ein Konto verwendet werden.",
        "Viele kleine Firmen speichern ihre Daten heute in der Cloud statt auf eigenen Servern.",
        "Das neue Smartphone hat einen größeren Akku, ist aber spürbar schwerer als sein Vorgänger.",
        "Open-Source-Software kann von allen eingesehen, verändert und weitergegeben werden.",
        "Vor dem Kauf eines neuen Laptops lohnt es sich zu überlegen, wofür man ihn wirklich braucht.",
        "Eine Datensicherung nützt nur, wenn man regelmäßig prüft, ob sie sich auch wiederherstellen lässt.",
        "Elektroautos werden beliebter, weil das Netz der Ladestationen wächst.",
        "Die Schule hat Tablets im Unterricht eingeführt und die Lehrpersonen darin geschult.",
        "Sprachmodelle werden mit großen Textsammlungen trainiert und lernen, das nächste Wort vorherzusagen.",
        "Eine langsame Internetverbindung liegt oft eher an einem alten Router als am Anbieter.",
        "Die Stadt testet Sensoren, die Autofahrern freie Parkplätze anzeigen.",
    ],
    "history": [
        "Die Burg wurde im dreizehnten Jahrhundert erbaut, um den Handelsweg über den Pass zu kontrollieren.",
        "Jahrhundertelang war das Kloster das wichtigste Zentrum der Gelehrsamkeit in der Region.",
        "Die Eisenbahn erreichte das Tal im Jahr 1889 und veränderte das Leben seiner Bewohner für immer.",
        "Im neunzehnten Jahrhundert wanderten viele Familien wegen Armut und Hunger nach Amerika aus.",
        "Das alte Rathaus überstand einen großen Brand, der die meisten Häuser ringsum zerstörte.",
        "Beim Bau des neuen Parkhauses fanden Archäologen römische Münzen und Tonscherben.",
        "Die erste schriftliche Erwähnung des Dorfes findet sich in einer Urkunde aus dem Jahr 1150.",
        "Während des Krieges war die Brücke für beide Seiten von großer strategischer Bedeutung.",
        "Der Buchdruck machte Bücher billiger und half, neue Ideen in ganz Europa zu verbreiten.",
        "Die Frauen im Land erhielten das Stimmrecht erst nach einem langen politischen Kampf.",
        "Das Museum zeigt Werkzeuge und Kleider, die vom Leben der Bauern vor zweihundert Jahren erzählen.",
        "Der Kanal wurde von Hand gegraben, und die Arbeiten dauerten fast zwanzig Jahre.",
    ],
    "sport": [
        "Die Heimmannschaft gewann das Spiel dank eines Tores in der letzten Minute mit zwei zu eins.",
        "Tausende Läuferinnen und Läufer nahmen trotz des Regens am Stadtmarathon teil.",
        "Langlauf gehört zu den anspruchsvollsten Ausdauersportarten.",
        "Der junge Tennisspieler stand zum ersten Mal im Finale des Turniers.",
        "Das Radrennen führt über drei Bergpässe und endet mit einem steilen Anstieg.",
        "Regelmäßige Bewegung verbessert nicht nur die Fitness, sondern auch die Stimmung und den Schlaf.",
        "Der Trainer lobte die Spieler für ihre Disziplin und ihren Teamgeist.",
        "Die neue Sporthalle steht ab Herbst den Schulen und Vereinen zur Verfügung.",
        "Die Eishockeysaison beginnt im September und endet im Frühling mit den Playoffs.",
        "Schwimmen ist ein schonender Sport, der für Menschen jeden Alters geeignet ist.",
        "Der örtliche Fußballverein sucht Freiwillige, die seine Jugendmannschaften trainieren.",
        "Nach einer schweren Verletzung brauchte die Athletin fast ein Jahr bis zu ihrem ersten Wettkampf.",
    ],
    "nature": [
        "Im Herbst färben sich die Lärchen goldgelb, bevor sie ihre Nadeln verlieren.",
        "Der Steinbock war in den Alpen fast verschwunden, ist dank Schutzprogrammen aber zurückgekehrt.",
        "Feuchtgebiete speichern große Mengen Wasser und bieten vielen seltenen Arten einen Lebensraum.",
        "Der Gletscher hat in den letzten fünfzig Jahren mehr als ein Drittel seines Volumens verloren.",
        "Murmeltiere verschlafen die langen Wintermonate in Bauen tief unter der Erde.",
        "Im Frühsommer bedecken Wildblumen die Wiesen und locken unzählige Insekten an.",
        "Der Fluss hat wieder einen natürlicheren Lauf erhalten, und die Fische sind zurückgekehrt.",
        "Greifvögel nutzen warme Aufwinde, um stundenlang zu gleiten, ohne mit den Flügeln zu schlagen.",
        "Der Wald schützt das Dorf unterhalb vor Lawinen und Steinschlag.",
        "Wanderer werden gebeten, auf den Wegen zu bleiben, um die Wildtiere nicht zu stören.",
        "In besonders kalten Wintern friert der See zu, doch das Eis ist selten sicher genug zum Betreten.",
        "Pilze spielen im Wald eine wichtige Rolle, weil sie totes Holz zersetzen.",
    ],
}

TITLES = {
    "travel": [
        "Ein Wochenende in den Bergen",
        "Reisetipps für die Nebensaison",
        "Mit dem Zug dem See entlang",
    ],
    "cooking": [
        "Unsere liebsten Winterrezepte",
        "Brot backen zu Hause",
        "Einfach kochen mit Gemüse der Saison",
    ],
    "science": [
        "Wie man Gletscher vermisst",
        "Warum Eis auf dem Wasser schwimmt",
        "Neues aus der Astronomie",
    ],
    "local_news": [
        "Aus dem Gemeinderat",
        "Bauarbeiten an der Hauptstraße",
        "Ein Fest für die neue Brücke",
    ],
    "technology": [
        "Tipps für sichere Passwörter",
        "Lohnt sich die Cloud für kleine Firmen",
        "Das neue Smartphone im Test",
    ],
    "history": [
        "Die Geschichte unseres Tals",
        "Als die Eisenbahn kam",
        "Schätze aus dem Ortsmuseum",
    ],
    "sport": [
        "Bericht vom Stadtmarathon",
        "Später Sieg für die Heimmannschaft",
        "Wintersport für Anfänger",
    ],
    "nature": [
        "Herbst im Lärchenwald",
        "Die Rückkehr des Steinbocks",
        "Unsere Feuchtgebiete schützen",
    ],
}

SECTIONS = {
    "travel": "reisen",
    "cooking": "rezepte",
    "science": "wissen",
    "local_news": "lokales",
    "technology": "technik",
    "history": "geschichte",
    "sport": "sport",
    "nature": "natur",
}

TOXIC = [
    "Du bist ein erbärmlicher Idiot, und niemand will deinen Müll lesen.",
    "Halt endlich die Klappe, du hirnloser Trottel, und kriech zurück unter deinen Stein.",
    "Nur ein kompletter Vollidiot kann so einen wertlosen Schrott schreiben.",
    "Verschwinde, du elender Versager, hier kann dich keiner ausstehen.",
    "Du widerlicher Clown, deine dummen Meinungen machen mich krank.",
    "Was für ein nutzloser Haufen Dreck du bist, hau ab und komm nie wieder.",
    "Niemand interessiert sich für dich und dein armseliges Leben, du Depp.",
    "Alle wissen, dass du ein verlogener, feiger Schwächling bist.",
    "Dein Hirn ist wohl so groß wie eine Erbse, du ahnungsloser Idiot.",
    "Hör auf, deinen idiotischen Unsinn zu posten, du nerviger kleiner Troll.",
    "Du bist zu blöd, um irgendetwas zu verstehen, also halt dein dreckiges Maul.",
    "Dieser Autor ist ein schamloser Betrüger und eine totale Zumutung.",
]

BOILERPLATE = {
    "cookie": (
        "Diese Website verwendet Cookies, um Ihr Nutzungserlebnis zu verbessern. Wenn Sie weitersurfen, "
        "stimmen Sie der Verwendung von Cookies zu."
    ),
    "cookie_buttons": ["Alle akzeptieren", "Nur notwendige Cookies", "Einstellungen"],
    "nav": [
        "Startseite",
        "Aktuelles",
        "Über uns",
        "Angebote",
        "Blog",
        "Shop",
        "Kontakt",
        "Impressum",
        "Datenschutz",
        "Anmelden",
    ],
    "read_more": "Weiterlesen",
    "related": "Ähnliche Artikel",
    "share": "Artikel teilen",
    "newsletter": "Newsletter abonnieren",
    "rights": "Alle Rechte vorbehalten.",
    "back_to_top": "Nach oben",
}

SPAM = [
    "günstig",
    "jetzt kaufen",
    "bester Preis",
    "Rabatt",
    "gratis Versand",
    "Onlineshop",
    "Schnäppchen",
    "heute bestellen",
    "Schuhe",
    "Uhren",
    "Angebot",
    "Top Deals",
]

PII = {
    "email": "Bei Fragen zu diesem Artikel schreiben Sie bitte an {email}.",
    "phone": "Sie erreichen unser Büro telefonisch unter {phone_national} oder aus dem Ausland unter {phone_international}.",
    "ipv4": "Während der Störung war der Server unter {ipv4} mehrere Stunden lang nicht erreichbar.",
    "ipv6": "Unsere Website ist auch über IPv6 unter der Adresse {ipv6} erreichbar.",
    "iban": "Spenden an den Verein können auf das Konto {iban} überwiesen werden.",
}

LOOKALIKES = {
    "version": "Die Version {version} der Fahrplan-App ist seit dem {date_iso} verfügbar.",
    "build": "Die Computer der Bibliothek wurden am {date_local} auf den Build {build} aktualisiert.",
    "price": "Der gedruckte Führer kostet {price} und kann unter der ISBN {isbn} bestellt werden.",
    "address": "Das Tourismusbüro ist von {time_open} bis {time_close} Uhr geöffnet und befindet sich in {postcode} {city}.",
}

FOOTER = "Dieser Artikel wurde zuletzt von unserer Redaktion überprüft."

LOCALE = {
    "country": "DE",
    "mail_names": [
        "anna.keller",
        "thomas.mueller",
        "info",
        "redaktion",
        "lukas.schneider",
        "sabine.wolf",
    ],
    "cities": [
        ("10115", "Berlin"),
        ("80331", "München"),
        ("8001", "Zürich"),
        ("3011", "Bern"),
        ("6020", "Innsbruck"),
    ],
    "date_local": "{d:02d}.{m:02d}.{y}",
    "price": "{units},{cents:02d} €",
    "isbn_group": "3",
}
