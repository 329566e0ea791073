# ruff: noqa: E501  (a text bank: one natural sentence per line reads better than wrapped strings)
"""Romansh (rm) text bank of the sample corpus, in Rumantsch Grischun (the common written standard).

Place names use their Romansh forms: Cuira (Chur), Turitg (Zurich), San Murezzan (St. Moritz),
Glion (Ilanz), Mustér (Disentis). fastText lid.176 mostly labels Rumantsch Grischun as Italian;
the sample-corpus tests measure and document that instead of hiding it.
"""

TOPICS = {
    "travel": [
        "Il tren da notg da Turitg a Vienna parta curt suenter las nov ed arriva a temp per l'ensolver.",
        "Blers viagiaturs na s'imaginan betg quant fraid ch'i po far sin in pass da muntogna, era a mez la stad.",
        "La citad veglia è uschè pitschna ch'ins la po visitar a pe en in sulet suentermezdi.",
        "Nus avain reservà ina pensiun simpla sper il port, e nus ans essan dasdads cun la canera dals bartgs da pestgar.",
        "In abunament regiunal per il tren è savens pli bunmartgà ch'in bigliet singul per mintga viadi.",
        "La traversada cun la nav dura var duas uras, e cura ch'il temp è cler vesa ins las inslas da la nav.",
        "La dumengia circulan ils bus locals pli darar, e perquai èsi bun da guardar gia avant en l'urari.",
        "La senda munta plaun a plaun tras ils guauds da laresch avant ch'ella arriva sin in'alp vasta.",
        "Tgi che viagia ordaifer la stagiun auta chatta main glieud e paja pli pauc per l'allogi.",
        "Il pitschen museum sper la staziun raquinta l'istorgia da la vallada e da ses abitants.",
        "Suenter in lung di en la citad essan nus restads sin la terrassa ed avain guardà co ch'il sulegl tramunta sur il lai.",
        "I vala la paina da prender cun sai in pau daners en contanti, perquai che betg mintga chamona da muntogna accepta cartas.",
    ],
    "cooking": [
        "Lavurar la pasta almain diesch minutas, fin ch'ella è fina ed elastica.",
        "In zic sal fa vegnir ora la dultschezza da las tomatas madiras.",
        "La supa ha anc meglier gust il segund di, cura che las aromas han gì temp da sa maschadar.",
        "Rostir las nuschs curt en ina padella sitga, fin ch'ellas èn in zic brinas.",
        "Per ina sosa main grassa remplazza ins la mesadad da la groma cun buglion da legums.",
        "Laschar ruassar la charn in pèr minutas avant che la tagliar, uschia ch'il suc resta en la charn.",
        "Las erbas frestgas vegnan agiuntadas pir a la fin, uschiglio perdan ellas lur aroma.",
        "Mia tatta fascheva paun mintga sonda damaun, e nus uffants spetgavan cun plaschair il paun chaud.",
        "Tartuffels, tschagulas ed in pau chaschiel tanschan per in past chaud en l'enviern.",
        "La tuorta da nuschs grischuna sto restar var in'ura en il furn avant ch'ella è pronta.",
        "Ils legums da la stagiun dal martgà èn per il solit pli frestgs e pli bunmartgads che quels dal supermartgà.",
        "Cuschinar la pasta en bler'aua cun sal e la servir cura ch'ella è anc in zic dira.",
    ],
    "science": [
        "L'aua daventa pli voluminusa cura ch'ella dschela, perquai nuda il glatsch sin la surfatscha dals lais.",
        "Las plantas duvran la glisch dal sulegl per transfurmar il dioxid da carbon e l'aua en zutger ed oxigen.",
        "Ils perscrutaders han mesirà durant trais onns la temperatura dal glatscher en differentas profunditads.",
        "La glisch dal sulegl dovra in pau dapli che otg minutas per arrivar sin la terra.",
        "Las vaccinaziuns preparan il sistem immunitar a renconuscher in agent patogen avant ina vaira infecziun.",
        "L'experiment è vegnì repetì pliras giadas per esser segir ch'ils resultats èn fidaivels.",
        "Las avieuls mussan ina a l'autra nua ch'i dat flurs cun in saut spezial.",
        "Il tun sa derasa bler pli svelt en l'aua che en l'aria.",
        "Il tscharvè uman cuntegna milliardas da cellas nervusas ch'èn colliadas en raits cumplexas.",
        "Terratrembels capitan cura che plattas tectonicas sa muventan andetgamain lung ina ruptura.",
        "Ina buna teoria scientifica fa prognosas che pon vegnir examinadas cun observaziuns.",
        "Il nov telescop permetta als astronoms d'observar galaxias ch'èn sa furmadas curt suenter il big bang.",
    ],
    "local_news": [
        "La suprastanza communala ha approvà mardi saira il budget per la renovaziun da la scola primara.",
        "Las lavurs da construcziun sin il stradun duran anc fin la fin d'october.",
        "Pli che duatschient voluntaris han gidà la fin d'emna passada a nettegiar la riva dal flum.",
        "A partir dal proxim mais ha il martgà d'emna lieu sin la plazza davant la baselgia.",
        "La biblioteca communala ha prolungà ses urari d'avertura ed è ussa era averta la sonda suentermezdi.",
        "Las abitantas ed ils abitants èn vegnids envidads ad ina radunanza publica davart il project d'ina nova senda da velo.",
        "Ils pumpiers han stuì intervegnir duas giadas durant l'orcan per allontanar bostgs crudads.",
        "Il vitg ha festivà la reavertura da sia punt renovada cun musica ed ina pitschna festa.",
        "Ina nova lingia da bus vegn a colliar ils quartiers ordaifer cun la staziun.",
        "Il president communal ha engrazià a tut las uniuns per lur engaschament en favur da la cuminanza.",
        "La pischina resta serrada questa stad pervia da reparaturas urgentas.",
        "Geniturs han rimnà suttascripziuns per in passapei pli segir davant la scolina.",
    ],
    "technology": [
        "Actualisaziuns regularas da la software eliminan mancanzas da segirezza che attatgaders pudessan utilisar.",
        "In bun pled-clav sto esser lung e na duai mai vegnir duvrà per plirs contos.",
        "Bleras pitschnas interpresas memoriseschan oz lur datas en il cloud empè da sin agens servers.",
        "Il nov telefonin ha ina battaria pli gronda, ma el è bler pli grev che ses predecessur.",
        "Software libra po vegnir examinada, midada e repartida da mintgin.",
        "Avant che cumprar in nov laptop èsi bun da ponderar per tge ch'ins dovra el propi.",
        "Copias da segirezza èn mo nizzaivlas, sch'ins controllescha regularmain ch'ellas pon propi vegnir restauradas.",
        "Ils autos electrics vegnan pli populars, perquai che la rait da staziuns da chargiar crescha.",
        "La scola ha introducì tablets en las classas ed ha furmà sias magistras e ses magisters.",
        "Models da lingua vegnan trenads cun grondas collecziuns da texts ed emprendan a predir il proxim pled.",
        "Ina colliaziun d'internet plauna dependa savens d'in vegl router e betg dal purschider.",
        "La citad testescha sensors che mussan als automobilists nua ch'i dat plazzas da parcar libras.",
    ],
    "history": [
        "Il chastè è vegnì bajegià en il tredeschavel tschientaner per controllar la via da commerzi sur il pass.",
        "Durant tschientaners era la claustra il center da furmaziun il pli impurtant da la regiun.",
        "La viafier è arrivada en la vallada il 1889 ed ha midà per adina la vita da ses abitants.",
        "En il nundeschavel tschientaner èn bleras famiglias emigradas en l'America pervia da la paupradad e da la fom.",
        "La veglia chasa communala ha survivì in grond incendi che ha destruì la gronda part da las chasas enturn.",
        "Durant la construcziun dal nov parcadi han archeologs chattà munaidas e ceramica romanas.",
        "La menziun scritta la pli veglia dal vitg sa chatta en in document da l'onn 1150.",
        "Durant la guerra aveva la punt ina gronda impurtanza strategica per omaduas varts.",
        "La stampa ha rendì ils cudeschs pli bunmartgads ed ha gidà a derasar novas ideas en tut l'Europa.",
        "Las dunnas dal pajais han survegnì il dretg da votar pir suenter in lung cumbat politic.",
        "Il museum expona utensils e vestgadira che mussan co ch'ils purs vivevan avant duatschient onns.",
        "Il chanal è vegnì chavà a maun, e las lavurs han durà quasi ventg onns.",
    ],
    "sport": [
        "La squadra da chasa ha gudagnà il gieu dus a in grazia ad in gol en l'ultima minuta.",
        "Millis da curriders han prendì part al maraton da la citad malgrà la plievgia.",
        "Il passlung è in dals sports da persistenza ils pli pretensius.",
        "Il giuven giugader da tennis è arrivà per l'emprima giada en la finala dal turnier.",
        "La cursa da velo maina sur trais pass da muntogna e finescha cun in'ascensiun fitg stipa.",
        "Il moviment regular meglierescha betg mo la cundiziun fisica, mabain era l'umor ed il sien.",
        "Il trenader ha ludà ils giugaders per lur disciplina e lur spiert da squadra.",
        "La nova halla da sport stat a partir da l'atun a disposiziun a las scolas ed a las uniuns.",
        "La stagiun da hockey sin glatsch cumenza en settember e finescha la primavaira cun ils playoffs.",
        "Nudar è in sport moderà ch'è adattà per persunas da tut las vegliadetgnas.",
        "Il club da ballape local tschertga voluntaris per trenar sias squadras da giuvenils.",
        "Suenter ina blessura greva ha l'atleta duvrà quasi in onn per turnar a las concurrenzas.",
    ],
    "nature": [
        "L'atun daventan ils bostgs da laresch mellens sco l'aur avant ch'els perdan lur guglias.",
        "Il capricorn era quasi svanì da las Alps, ma el è turnà grazia a programs da protecziun.",
        "Zonas umidas tegnan enavos grondas quantitads d'aua e porschan spazi da viver a bleras spezias raras.",
        "Il glatscher ha pers en ils ultims tschuncanta onns dapli ch'in terz da ses volumen.",
        "Las muntanellas dorman durant ils lungs mais d'enviern en lur tanas sut terra.",
        "A l'entschatta da la stad cuvran flurs selvadias ils prads e tiran a sai numerus insects.",
        "Il flum ha survegnì puspè in curs pli natiral, ed ils peschs èn turnads.",
        "Utschels da rapina utiliseschan las currentas d'aria chauda per planar uras a la lunga senza batter las alas.",
        "Il guaud protegia il vitg sutvart da lavinas e da crappa che croda.",
        "Ils viandants vegnan supplitgads da restar sin las sendas per betg disturbar la selvaschina.",
        "En envierns particularmain fraids dschela il lai, ma il glatsch è darar avunda gross per chaminar sin el.",
        "Ils bulieus han ina funcziun impurtanta en il guaud, perquai ch'els decumponan il lain mort.",
    ],
}

TITLES = {
    "travel": [
        "In fin d'emna en las muntognas",
        "Tips per viagiar ordaifer la stagiun",
        "Cun il tren lung il lai",
    ],
    "cooking": [
        "Nossas receptas d'enviern preferidas",
        "Far paun a chasa",
        "Cuschinar simpel cun legums da la stagiun",
    ],
    "science": [
        "Co ch'ins mesira ils glatschers",
        "Pertge ch'il glatsch nuda",
        "Novitads da l'astronomia",
    ],
    "local_news": [
        "Novitads da la suprastanza communala",
        "Lavurs sin il stradun",
        "Ina festa per la nova punt",
    ],
    "technology": [
        "Tips per pleds-clav segirs",
        "È il cloud adattà per pitschnas interpresas",
        "Il nov telefonin en il test",
    ],
    "history": [
        "L'istorgia da nossa vallada",
        "Cura che la viafier è arrivada",
        "Scazis dal museum local",
    ],
    "sport": [
        "Rapport dal maraton da la citad",
        "Victoria tardiva per la squadra da chasa",
        "Sport d'enviern per principiants",
    ],
    "nature": [
        "L'atun en il guaud da laresch",
        "Il return dal capricorn",
        "Proteger nossas zonas umidas",
    ],
}

SECTIONS = {
    "travel": "viadis",
    "cooking": "receptas",
    "science": "scienza",
    "local_news": "novitads",
    "technology": "tecnologia",
    "history": "istorgia",
    "sport": "sport",
    "nature": "natira",
}

TOXIC = [
    "Ti es in idiot miserabel, e nagin na vul leger tes rument.",
    "Tascha finalmain, ti nar senza tscharvè, e turna sut tes crap.",
    "Mo in idiot cumplet po scriver ina tala stupidadad senza valur.",
    "Va davent, ti pover perdider, qua na po nagin ta supportar.",
    "Ti clown nauschaivel, tias opiniuns stupidas ma fan vegnir mal.",
    "Ti es in rument che na serva a nagut, va davent e na turna mai pli.",
    "Nagin na s'interessa per tai e per tia vita miserabla, ti nar.",
    "Tuts san che ti es in manzaser ed in vigliac senza curaschi.",
    "Tes tscharvè è segir uschè pitschen sco in arbaja, ti idiot ignorant.",
    "Chala da publitgar tias narradads, ti troll fastidius.",
    "Ti es memia stupid per chapir insatge, pia tegna serrada tia bucca.",
    "Quest autur è in engianader senza turpetg ed in incapabel total.",
]

BOILERPLATE = {
    "cookie": (
        "Questa pagina d'internet utilisescha cookies per meglierar vossa experientscha. Sche vus "
        "navigais vinavant, acceptais vus l'utilisaziun da cookies."
    ),
    "cookie_buttons": ["Acceptar tut", "Mo cookies necessaris", "Parameters"],
    "nav": [
        "Pagina iniziala",
        "Novitads",
        "Davart nus",
        "Servetschs",
        "Blog",
        "Butia",
        "Contact",
        "Impressum",
        "Protecziun da datas",
        "S'annunziar",
    ],
    "read_more": "Leger dapli",
    "related": "Artitgels sumegliants",
    "share": "Parter quest artitgel",
    "newsletter": "Abunar noss newsletter",
    "rights": "Tut ils dretgs reservads.",
    "back_to_top": "Enavos ensi",
}

SPAM = [
    "bunmartgà",
    "cumprar ussa",
    "il meglier pretsch",
    "rabat",
    "spediziun gratuita",
    "butia online",
    "acziun",
    "empustar oz",
    "chalzers",
    "uras",
    "occasiun",
    "offertas spezialas",
]

PII = {
    "email": "Per dumondas davart quest artitgel scrivai per plaschair a {email}.",
    "phone": "Vus cuntanschais noss biro per telefon al numer {phone_national} u da l'exteriur al numer {phone_international}.",
    "ipv4": "Durant la panna n'era il server {ipv4} betg cuntanschibel durant pliras uras.",
    "ipv6": "Nossa pagina d'internet è era cuntanschibla via IPv6 sut l'adressa {ipv6}.",
    "iban": "Donaziuns a l'uniun pon vegnir pajadas sin il conto {iban}.",
}

LOOKALIKES = {
    "version": "La versiun {version} da l'app cun l'urari è disponibla dapi il {date_iso}.",
    "build": "Ils computers da la biblioteca èn vegnids actualisads ils {date_local} al build {build}.",
    "price": "Il guid stampà custa {price} e po vegnir empustà cun l'ISBN {isbn}.",
    "address": "L'uffizi da turissem è avert da las {time_open} fin las {time_close} e sa chatta a {postcode} {city}.",
}

FOOTER = "Quest artitgel è vegnì controllà l'ultima giada da nossa redacziun."

LOCALE = {
    "country": "CH",
    "mail_names": [
        "gian.caduff",
        "ursina.cathomen",
        "info",
        "redacziun",
        "flurin.casanova",
        "mengia.derungs",
    ],
    "cities": [
        ("7000", "Cuira"),
        ("7130", "Glion"),
        ("7550", "Scuol"),
        ("7180", "Mustér"),
        ("7500", "San Murezzan"),
    ],
    "date_local": "{d:02d}.{m:02d}.{y}",
    "price": "CHF {units}.{cents:02d}",
    "isbn_group": "3",
}
