# ruff: noqa: E501  (a text bank: one natural sentence per line reads better than wrapped strings)
"""Dutch (nl) text bank of the sample corpus."""

TOPICS = {
    "travel": [
        "De nachttrein van Zürich naar Wenen vertrekt kort na negen uur en komt op tijd voor het ontbijt aan.",
        "Veel reizigers onderschatten hoe koud het op een bergpas kan worden, zelfs midden in de zomer.",
        "De oude binnenstad is zo klein dat je haar in één middag te voet kunt verkennen.",
        "We hadden een eenvoudig pension bij de haven geboekt en werden wakker van het geluid van de vissersboten.",
        "Een regionaal treinabonnement is vaak goedkoper dan voor elke rit een los kaartje kopen.",
        "De overtocht met de veerboot duurt ongeveer twee uur, en bij helder weer zie je de eilanden vanaf het dek.",
        "Op zondag rijden de lokale bussen minder vaak, dus het is verstandig om de dienstregeling vooraf te bekijken.",
        "Het wandelpad klimt gestaag door lariksbossen voordat het uitkomt op een brede alpenweide.",
        "Wie buiten het hoogseizoen reist, treft minder drukte en betaalt minder voor een overnachting.",
        "Het kleine museum naast het station vertelt de geschiedenis van het dal en zijn bewoners.",
        "Na een lange dag vol bezienswaardigheden zaten we op het terras en keken we hoe de zon boven het meer onderging.",
        "Het is verstandig wat contant geld mee te nemen, want niet elke berghut accepteert pinpassen.",
    ],
    "cooking": [
        "Kneed het deeg minstens tien minuten, tot het glad en elastisch aanvoelt.",
        "Een snufje zout haalt de zoetheid van rijpe tomaten naar boven.",
        "De soep smaakt de volgende dag nog beter, als de smaken de tijd hebben gehad om te mengen.",
        "Rooster de noten kort in een droge koekenpan tot ze gaan geuren.",
        "Voor een lichtere saus vervang je de helft van de room door groentebouillon.",
        "Laat het vlees een paar minuten rusten voordat je het aansnijdt, zodat het sap erin blijft.",
        "Verse kruiden voeg je pas helemaal aan het eind toe, anders verliezen ze hun aroma.",
        "Mijn oma bakte elke zaterdagochtend brood, en het hele huis rook heerlijk.",
        "Aardappelen, uien en een beetje kaas zijn genoeg voor een warme maaltijd in de winter.",
        "De cake is klaar als een houten prikker die je in het midden steekt er schoon uitkomt.",
        "Seizoensgroenten van de markt zijn meestal verser en goedkoper dan die uit de supermarkt.",
        "Kook de pasta in ruim water met zout en giet hem af terwijl hij nog beetgaar is.",
    ],
    "science": [
        "Water zet uit als het bevriest, en daarom drijft ijs op het oppervlak van meren.",
        "Planten gebruiken zonlicht om koolstofdioxide en water om te zetten in suiker en zuurstof.",
        "De onderzoekers hebben drie jaar lang de temperatuur van de gletsjer op verschillende diepten gemeten.",
        "Het licht van de zon doet er iets meer dan acht minuten over om de aarde te bereiken.",
        "Vaccins leren het immuunsysteem een ziekteverwekker te herkennen voordat er een echte infectie optreedt.",
        "Het experiment werd meerdere keren herhaald om zeker te zijn dat de resultaten betrouwbaar waren.",
        "Bijen laten elkaar met een speciale dans weten waar ze bloemen kunnen vinden.",
        "Geluid plant zich in water veel sneller voort dan in lucht.",
        "Het menselijk brein bevat miljarden zenuwcellen die in complexe netwerken met elkaar verbonden zijn.",
        "Aardbevingen ontstaan wanneer tektonische platen plotseling langs een breuk verschuiven.",
        "Een goede wetenschappelijke theorie doet voorspellingen die je door waarneming kunt toetsen.",
        "Met de nieuwe telescoop kunnen sterrenkundigen sterrenstelsels bekijken die kort na de oerknal zijn ontstaan.",
    ],
    "local_news": [
        "De gemeenteraad heeft dinsdagavond de begroting voor de renovatie van de basisschool goedgekeurd.",
        "De werkzaamheden aan de hoofdweg duren nog tot eind oktober.",
        "Meer dan tweehonderd vrijwilligers hielpen afgelopen weekend met het schoonmaken van de rivieroever.",
        "Vanaf volgende maand verhuist de weekmarkt naar het plein voor de kerk.",
        "De openbare bibliotheek heeft haar openingstijden verruimd en is nu ook op zaterdagmiddag open.",
        "Bewoners werden uitgenodigd voor een openbare bijeenkomst over de plannen voor een nieuw fietspad.",
        "De brandweer moest tijdens de storm twee keer uitrukken om omgewaaide bomen weg te halen.",
        "Het dorp vierde de heropening van de gerestaureerde brug met muziek en een klein feest.",
        "Een nieuwe buslijn gaat de buitenwijken verbinden met het station.",
        "De burgemeester bedankte alle verenigingen voor hun inzet voor de gemeenschap.",
        "Het zwembad blijft deze zomer gesloten vanwege dringende reparaties.",
        "Ouders hebben handtekeningen verzameld voor een veiliger zebrapad bij de kinderopvang.",
    ],
    "technology": [
        "Regelmatige software-updates dichten beveiligingslekken die aanvallers anders zouden kunnen misbruiken.",
        "Een sterk wachtwoord is lang en wordt nooit voor meer dan één account gebruikt.",
        "Veel kleine bedrijven bewaren hun gegevens tegenwoordig in de cloud in plaats van op eigen servers.",
        "De nieuwe smartphone heeft een grotere accu, maar is merkbaar zwaarder dan zijn voorganger.",
        "Opensourcesoftware kan door iedereen worden bekeken, aangepast en gedeeld.",
        "Voordat je een nieuwe laptop koopt, is het goed om na te denken waarvoor je hem echt nodig hebt.",
        "Een back-up is alleen nuttig als je regelmatig controleert of hij ook echt kan worden teruggezet.",
        "Elektrische auto's worden populairder naarmate het netwerk van laadpalen groeit.",
        "De school heeft tablets in de klas ingevoerd en haar leraren geleerd ermee te werken.",
        "Taalmodellen worden getraind op grote verzamelingen tekst en leren het volgende woord te voorspellen.",
        "Een trage internetverbinding komt vaak eerder door een oude router dan door de provider.",
        "De stad test sensoren die automobilisten laten zien waar nog parkeerplaatsen vrij zijn.",
    ],
    "history": [
        "Het kasteel werd in de dertiende eeuw gebouwd om de handelsroute over de pas te beheersen.",
        "Eeuwenlang was het klooster het belangrijkste centrum van geleerdheid in de streek.",
        "De spoorlijn bereikte het dal in 1889 en veranderde het leven van de bewoners voorgoed.",
        "In de negentiende eeuw emigreerden veel gezinnen naar Amerika vanwege armoede en honger.",
        "Het oude stadhuis overleefde een grote brand die de meeste huizen eromheen verwoestte.",
        "Bij de bouw van de nieuwe parkeergarage vonden archeologen Romeinse munten en aardewerk.",
        "De eerste schriftelijke vermelding van het dorp staat in een oorkonde uit het jaar 1150.",
        "Tijdens de oorlog was de brug voor beide partijen van groot strategisch belang.",
        "De boekdrukkunst maakte boeken goedkoper en hielp nieuwe ideeën zich over Europa te verspreiden.",
        "Vrouwen in het land kregen pas kiesrecht na een lange politieke strijd.",
        "Het museum toont gereedschap en kleding die laten zien hoe boeren tweehonderd jaar geleden leefden.",
        "Het kanaal werd met de hand gegraven en het werk duurde bijna twintig jaar.",
    ],
    "sport": [
        "De thuisploeg won de wedstrijd met twee tegen één dankzij een doelpunt in de laatste minuut.",
        "Duizenden lopers deden ondanks de regen mee aan de stadsmarathon.",
        "Langlaufen is een van de zwaarste duursporten die er bestaan.",
        "De jonge tennisser bereikte voor het eerst de finale van het toernooi.",
        "De wielerkoers gaat over drie bergpassen en eindigt met een steile klim.",
        "Regelmatig bewegen verbetert niet alleen de conditie, maar ook het humeur en de nachtrust.",
        "De trainer prees de spelers om hun discipline en teamgeest.",
        "De nieuwe sporthal is vanaf het najaar beschikbaar voor scholen en verenigingen.",
        "Het ijshockeyseizoen begint in september en eindigt in het voorjaar met de play-offs.",
        "Zwemmen is een zachte sport die geschikt is voor mensen van alle leeftijden.",
        "De plaatselijke voetbalclub zoekt vrijwilligers om de jeugdteams te trainen.",
        "Na een zware blessure had de atlete bijna een jaar nodig om terug te keren in de competitie.",
    ],
    "nature": [
        "In de herfst kleuren de lariksen goudgeel voordat ze hun naalden verliezen.",
        "De steenbok was bijna uit de Alpen verdwenen, maar is dankzij beschermingsprogramma's teruggekeerd.",
        "Moerasgebieden houden grote hoeveelheden water vast en bieden een leefgebied aan veel zeldzame soorten.",
        "De gletsjer heeft de afgelopen vijftig jaar meer dan een derde van zijn volume verloren.",
        "Marmotten brengen de lange wintermaanden slapend door in holen diep onder de grond.",
        "In de vroege zomer bedekken wilde bloemen de weiden en trekken ze talloze insecten aan.",
        "De rivier heeft weer een natuurlijkere loop gekregen, en de vissen zijn teruggekeerd.",
        "Roofvogels gebruiken warme luchtstromen om urenlang te zweven zonder met hun vleugels te slaan.",
        "Het bos beschermt het dorp eronder tegen lawines en vallend gesteente.",
        "Wandelaars wordt gevraagd op de paden te blijven om de dieren niet te verstoren.",
        "In bijzonder koude winters vriest het meer dicht, maar het ijs is zelden veilig genoeg om op te lopen.",
        "Paddenstoelen spelen een belangrijke rol in het bos, omdat ze dood hout afbreken.",
    ],
}

TITLES = {
    "travel": [
        "Een weekend in de bergen",
        "Reistips voor het laagseizoen",
        "Met de trein langs het meer",
    ],
    "cooking": [
        "Onze favoriete winterrecepten",
        "Zelf brood bakken",
        "Eenvoudig koken met seizoensgroenten",
    ],
    "science": [
        "Hoe je een gletsjer meet",
        "Waarom ijs blijft drijven",
        "Nieuws uit de sterrenkunde",
    ],
    "local_news": [
        "Nieuws uit de gemeenteraad",
        "Werkzaamheden aan de hoofdweg",
        "Een feest voor de nieuwe brug",
    ],
    "technology": [
        "Tips voor veilige wachtwoorden",
        "Is de cloud iets voor kleine bedrijven",
        "De nieuwe smartphone getest",
    ],
    "history": [
        "De geschiedenis van ons dal",
        "Toen de trein kwam",
        "Schatten uit het streekmuseum",
    ],
    "sport": [
        "Verslag van de stadsmarathon",
        "Late zege voor de thuisploeg",
        "Wintersport voor beginners",
    ],
    "nature": [
        "Herfst in het lariksbos",
        "De terugkeer van de steenbok",
        "Onze moerasgebieden beschermen",
    ],
}

SECTIONS = {
    "travel": "reizen",
    "cooking": "recepten",
    "science": "wetenschap",
    "local_news": "nieuws",
    "technology": "techniek",
    "history": "geschiedenis",
    "sport": "sport",
    "nature": "natuur",
}

TOXIC = [
    "Je bent een zielige idioot en niemand wil jouw troep lezen.",
    "Hou toch je mond, hersenloze sukkel, en kruip terug onder je steen.",
    "Alleen een volslagen imbeciel kan zulke waardeloze rommel schrijven.",
    "Rot op, ellendige mislukkeling, niemand hier kan je uitstaan.",
    "Walgelijke clown, van jouw domme meningen word ik misselijk.",
    "Wat ben jij een nutteloos stuk vuil, ga weg en kom nooit meer terug.",
    "Niemand geeft iets om jou of om je zielige leventje, sukkel.",
    "Iedereen weet dat je een leugenachtige, laffe slappeling bent.",
    "Je hersenen zijn vast zo groot als een erwt, domme idioot.",
    "Stop met het posten van je idiote onzin, irritant klein trolletje.",
    "Je bent te dom om ook maar iets te begrijpen, dus hou je grote bek dicht.",
    "Deze auteur is een schaamteloze oplichter en een totale nietsnut.",
]

BOILERPLATE = {
    "cookie": (
        "Deze website gebruikt cookies om uw ervaring te verbeteren. Als u verder surft, "
        "gaat u akkoord met het gebruik van cookies."
    ),
    "cookie_buttons": ["Alles accepteren", "Alleen noodzakelijke cookies", "Instellingen"],
    "nav": [
        "Home",
        "Nieuws",
        "Over ons",
        "Diensten",
        "Blog",
        "Winkel",
        "Contact",
        "Colofon",
        "Privacy",
        "Inloggen",
    ],
    "read_more": "Lees meer",
    "related": "Gerelateerde artikelen",
    "share": "Deel dit artikel",
    "newsletter": "Schrijf je in voor onze nieuwsbrief",
    "rights": "Alle rechten voorbehouden.",
    "back_to_top": "Terug naar boven",
}

SPAM = [
    "goedkoop",
    "nu kopen",
    "beste prijs",
    "korting",
    "gratis verzending",
    "webwinkel",
    "uitverkoop",
    "vandaag bestellen",
    "schoenen",
    "horloges",
    "koopje",
    "topaanbiedingen",
]

PII = {
    "email": "Hebt u vragen over dit artikel, mail dan naar {email}.",
    "phone": "U kunt ons kantoor bellen op {phone_national} of vanuit het buitenland op {phone_international}.",
    "ipv4": "Tijdens de storing was de server op {ipv4} urenlang onbereikbaar.",
    "ipv6": "Onze website is ook via IPv6 bereikbaar op het adres {ipv6}.",
    "iban": "Giften aan de vereniging kunnen worden overgemaakt op rekening {iban}.",
}

LOOKALIKES = {
    "version": "Versie {version} van de reisplanner-app is sinds {date_iso} beschikbaar.",
    "build": "Op {date_local} zijn de computers van de bibliotheek bijgewerkt naar build {build}.",
    "price": "De gedrukte gids kost {price} en is te bestellen onder ISBN {isbn}.",
    "address": "Het toeristenbureau is open van {time_open} tot {time_close} uur en is gevestigd in {postcode} {city}.",
}

FOOTER = "Dit artikel is voor het laatst nagekeken door onze redactie."

LOCALE = {
    "country": "NL",
    "mail_names": [
        "sanne.dejong",
        "thomas.visser",
        "info",
        "redactie",
        "lotte.bakker",
        "daan.smit",
    ],
    "cities": [
        ("1012 JS", "Amsterdam"),
        ("8011 AB", "Zwolle"),
        ("3511 AA", "Utrecht"),
        ("9000", "Gent"),
    ],
    "date_local": "{d:02d}-{m:02d}-{y}",
    "price": "€ {units},{cents:02d}",
    "isbn_group": "90",
}
